"""The product's import graph keeps its layers: every import (at the top of a module or
inside a function) goes from a higher layer to the same or a lower one, and no modules
import each other in a circle. A failure names the importing file and line.

The layers, lowest first, are listed in `PACKAGES` and, inside the broker, in
`BROKER_LAYERS`: the protocol (`wire`) under everything, the client (`sluice_client`) on it;
the broker and the Spark connector beside each other, neither importing the other; the `sluice` command over the broker; the
benchmarks and examples over all of them (not shipped, but kept free of circles too).
Importing a package's submodule also runs the package's `__init__`, which is not counted
as an import of it: a package may re-export what its modules define.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Top-level packages (and modules), each with what it may import besides itself.
PACKAGES = {
    "wire": set(),
    "sluice_client": {"wire"},
    "broker": {"wire", "sluice_client"},
    "spark_connector": {"wire", "sluice_client"},
    "pyspark_sluice": {"spark_connector"},
    "sluice": {"wire", "sluice_client", "broker"},
    "bench": {"wire", "sluice_client", "broker", "spark_connector", "sluice"},
    "examples": {"wire", "sluice_client", "broker", "spark_connector", "sluice"},
}

# The broker, lowest first: a module may import its own layer's and lower layers' modules.
BROKER_LAYERS = [
    # what everything stands on: time, errors, configuration, logging, rates, fail points,
    # and the answers a handler gives the network layer
    {"broker.clock", "broker.errors", "broker.config", "broker.features", "broker.failpoints",
     "broker.throttled_log", "broker.quota", "broker.handler_results"},
    # the disk and ZooKeeper
    {"broker.storage", "broker.zookeeper"},
    # state kept beside the logs, and the connections' security
    {"broker.client_quotas", "broker.dynamic_configs", "broker.producer_ids", "broker.fetch_sessions",
     "broker.coordinator_runtime", "broker.security"},
    # the network layer: moves bytes, knows nothing of the APIs (Kafka's listener, and the
    # HTTP server of the metrics endpoint and the console)
    {"broker.server", "broker.http"},
    # partitions, their replicas and the topics holding them
    {"broker.replica"},
    # the coordinators and topic administration
    {"broker.groups", "broker.transactions", "broker.topic_admin"},
    # a broker's part in a ZooKeeper cluster: membership, the controller, metadata
    {"broker.cluster"},
    # the APIs
    {"broker.handlers"},
    # the broker assembled, and what runs it
    {"broker.metrics", "broker.broker", "broker.embedded", "broker.cli", "broker.__main__"},
]


def product_modules() -> dict[str, Path]:
    modules = {}
    for top in PACKAGES:
        single = REPO / f"{top}.py"
        paths = [single] if single.exists() else sorted((REPO / top).rglob("*.py"))
        for path in paths:
            name = ".".join(path.relative_to(REPO).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    return modules


def _runtime_nodes(tree: ast.AST):
    """Every node, those under `if TYPE_CHECKING:` left out: an import for type hints only
    is not run, so it makes no dependency (the client's roles name the client so)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def imports(modules: dict[str, Path]) -> dict[str, list[tuple[str, int]]]:
    """Each module's imports of product modules: (module imported, line)."""

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    found = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = []
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                # `from package import module` imports the module; any other name, the package
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            else:
                continue
            for target in targets:
                module = known(target)
                if module is not None and module != name:
                    edges.append((module, node.lineno))
        found[name] = edges
    return found


def _top(module: str) -> str:
    return module.partition(".")[0]


def _broker_layer(module: str) -> int:
    if module == "broker":
        return len(BROKER_LAYERS) - 1
    for depth in range(module.count(".") + 1, 1, -1):  # the longest prefix named, not `broker` alone
        prefix = ".".join(module.split(".")[:depth])
        for index, layer in enumerate(BROKER_LAYERS):
            if prefix in layer:
                return index
    raise AssertionError(f"{module} is in no layer of BROKER_LAYERS: add it where it belongs")


def test_every_broker_module_has_a_layer():
    for name in product_modules():
        if _top(name) == "broker":
            _broker_layer(name)


def test_no_import_goes_up_a_layer():
    modules = product_modules()
    wrong = []
    for name, edges in imports(modules).items():
        for target, line in sorted(set(edges)):
            where = f"{modules[name].relative_to(REPO)}:{line} imports {target}"
            if _top(target) != _top(name) and _top(target) not in PACKAGES[_top(name)]:
                wrong.append(f"{where}: {_top(name)} does not import {_top(target)}")
            elif _top(name) == _top(target) == "broker" and _broker_layer(target) > _broker_layer(name):
                wrong.append(f"{where}, a higher layer (BROKER_LAYERS {_broker_layer(name)} -> "
                             f"{_broker_layer(target)})")
    assert not wrong, "\n".join(wrong)


def test_no_modules_import_each_other_in_a_circle():
    modules = product_modules()
    graph = {name: sorted({target for target, _ in edges}) for name, edges in imports(modules).items()}
    # Tarjan's strongly connected components, iteratively
    index, low, on_stack, stack, circles, counter = {}, {}, set(), [], [], 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    assert not circles, "modules importing each other: " + "; ".join(" <-> ".join(c) for c in circles)
