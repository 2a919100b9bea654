"""Sluice installed as a user installs it: its wheel (with the C extension) built from this
checkout and installed into a fresh virtual environment, `pip install sluice` alone.

Offline and fast: the dependencies come from `.cache/wheelhouse/`, wheels repacked once
from the distributions installed in the virtual environment running the tests (the exact
pinned versions `make test` installed), and `pip install --no-index` takes them from
there only; the wheel is built with this environment's setuptools (the test extra pins
it), not one pip would download. The fresh environment sees nothing else (no --system-site-packages), so a
dependency missing from pyproject.toml fails here as it would for a user.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import importlib.metadata
import io
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import zipfile

import pytest
from packaging.requirements import Requirement

from tests.support.polling import wait_for
from sluice.zookeeper import free_port

REPO = pathlib.Path(__file__).resolve().parent.parent
WHEELHOUSE = REPO / ".cache" / "wheelhouse"
PIP_TIMEOUT_S = 300


def _run(command: list, timeout: float = PIP_TIMEOUT_S, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(part) for part in command], capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def _checked(command: list, **kwargs) -> str:
    done = _run(command, **kwargs)
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _source_copy(into: pathlib.Path) -> pathlib.Path:
    """The checkout's files as git sees them (tracked, or new and not ignored), without
    build leftovers such as an in-place wire/_columns*.so."""
    files = _checked(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO)
    for name in filter(None, files.split("\0")):
        if (REPO / name).is_file():  # a deleted file not yet committed is still listed
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, into / name)
    return into


def _build(source: pathlib.Path, out: pathlib.Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """pip wheel of `source` with the running environment's setuptools (the test extra's)."""
    return _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                 "--no-index", "--isolated", "-w", out, source], env=env)


def _wheel_tags(dist: importlib.metadata.Distribution) -> str:
    """The file name's tags (e.g. py2.py3-none-any) from the Tag lines of the WHEEL file."""
    tags = [line.split(":", 1)[1].strip().split("-") for line in dist.read_text("WHEEL").splitlines()
            if line.startswith("Tag:")]
    return "-".join(".".join(dict.fromkeys(tag[part] for tag in tags)) for part in range(3))


def _repacked_wheel(dist: importlib.metadata.Distribution) -> pathlib.Path:
    """The wheel `dist` was installed from, rebuilt from its installed files (RECORD):
    scripts go back under .data/scripts with pip's `#!python` placeholder, console
    scripts are left for pip to generate again, bytecode is left out."""
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"]).lower()
    path = WHEELHOUSE / f"{name}-{dist.version}-{_wheel_tags(dist)}.whl"
    if path.exists():
        return path
    site = pathlib.Path(dist.locate_file(""))
    prefix = pathlib.Path(sys.prefix).resolve()
    generated = {entry.name for entry in dist.entry_points if entry.group in ("console_scripts", "gui_scripts")}
    dist_info = next(f.parts[0] for f in dist.files if f.parts[0].endswith(".dist-info"))
    data = f"{dist_info[:-len('.dist-info')]}.data"
    record = []
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_STORED) as wheel:
        for file in dist.files:
            source = (site / file).resolve()
            if (file.suffix == ".pyc" or "__pycache__" in file.parts or not source.is_file()
                    or str(file) in {f"{dist_info}/{n}" for n in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")}):
                continue
            content = source.read_bytes()
            if file.parts[0] != "..":
                arcname = str(file)
            elif source.relative_to(prefix).parts[0] == "bin":
                if source.name in generated:
                    continue
                arcname = f"{data}/scripts/{source.name}"
                if re.match(rb"#![^\n]*python[^\n]*\n", content):
                    content = b"#!python\n" + content.split(b"\n", 1)[1]
            else:
                arcname = f"{data}/data/{source.relative_to(prefix)}"
            wheel.writestr(zipfile.ZipInfo.from_file(source, arcname), content)  # keeps the mode
            digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
            record.append((arcname, f"sha256={digest}", len(content)))
        lines = io.StringIO()
        csv.writer(lines, lineterminator="\n").writerows(record + [(f"{dist_info}/RECORD", "", "")])
        wheel.writestr(f"{dist_info}/RECORD", lines.getvalue())
    partial.replace(path)
    return path


def _requirements(wheel: pathlib.Path, extras: set[str]) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(archive.read(n).decode() for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    return [Requirement(line.split(":", 1)[1].strip()) for line in metadata.splitlines()
            if line.startswith("Requires-Dist:")
            and _applies(Requirement(line.split(":", 1)[1].strip()), extras)]


def _applies(requirement: Requirement, extras: set[str]) -> bool:
    marker = requirement.marker
    return marker is None or any(marker.evaluate({"extra": extra}) for extra in extras | {""})


def _fill_wheelhouse(requirements: list[Requirement]) -> None:
    """Repack every distribution `requirements` need, transitively, as installed here."""
    pending, seen = list(requirements), set()
    while pending:
        requirement = pending.pop()
        key = re.sub(r"[-_.]+", "-", requirement.name).lower()
        if key in seen:
            continue
        seen.add(key)
        dist = importlib.metadata.distribution(requirement.name)
        assert requirement.specifier.contains(dist.version, prereleases=True), (
            f"{requirement} is wanted but {dist.version} is installed here: `make test` reinstalls")
        _repacked_wheel(dist)
        pending += [Requirement(text) for text in dist.requires or []
                    if _applies(Requirement(text), set(requirement.extras))]


def _install(tmp_path: pathlib.Path, extras: set[str] = frozenset()) -> pathlib.Path:
    """Sluice's wheel from this checkout, installed with `extras` into a fresh virtual
    environment by pip from the wheelhouse only; returns the environment's bin directory."""
    built = _build(_source_copy(tmp_path / "source"), tmp_path / "dist")
    assert built.returncode == 0, f"building the wheel failed:\n{built.stdout}\n{built.stderr}"
    wheel = next((tmp_path / "dist").glob("sluice-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        assert any(re.fullmatch(r"wire/_columns\..*\.so", n) for n in archive.namelist()), archive.namelist()
    _fill_wheelhouse(_requirements(wheel, set(extras)))
    venv = tmp_path / "venv"
    _checked([sys.executable, "-m", "venv", "--without-pip", venv])
    spec = f"sluice[{','.join(sorted(extras))}] @ {wheel.as_uri()}" if extras else str(wheel)
    _checked([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "--isolated", "install",
              "--no-index", "--find-links", WHEELHOUSE, spec])
    return venv / "bin"


# Produces to a topic and reads it back with the installed client; argv: bootstrap servers.
PRODUCE_AND_CONSUME = """
import sys
from sluice_client import Client, NewTopic
with Client(sys.argv[1], call_timeout=60) as client:
    client.admin.create_topics({"installed": NewTopic(partitions=1, replication_factor=1)})
    client.producer.produce("installed", 0, [(b"key", b"from a fresh venv", [], None)])
    print([record.value.decode() for record in client.consumer.fetch_records("installed", 0, 0).records])
"""

# Every module of the broker, the CLI and the client imports without Spark.
IMPORT_ALL = """
import importlib, pkgutil, sys
for package in ("wire", "sluice_client", "broker", "sluice"):
    for module in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
loaded = sorted(name for name in sys.modules if name.split(".")[0] in ("pyspark", "pyarrow", "spark_connector"))
assert not loaded, loaded
"""


@contextlib.contextmanager
def _running_broker(bin_dir: pathlib.Path, tmp_path: pathlib.Path):
    """The installed `sluice broker` on a free loopback port; yields its address and checks,
    once stopped (SIGTERM), that it exited cleanly."""
    port = free_port()
    log = tmp_path / "broker.log"
    with open(log, "w") as output:
        broker = subprocess.Popen([bin_dir / "sluice", "broker", "--data-dir", tmp_path / "data",
                                   "--host", "127.0.0.1", "--port", str(port)], cwd=tmp_path,
                                  stdout=output, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: _accepts(port) or broker.poll() is not None, timeout=60,
                 what="the installed broker to listen")
        assert broker.poll() is None, log.read_text()
        yield f"127.0.0.1:{port}"
    finally:
        broker.terminate()
        broker.wait(timeout=30)
    assert broker.returncode == 0, log.read_text()


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def test_the_broker_cli_and_client_install_without_spark(tmp_path):
    bin_dir = _install(tmp_path)
    python = bin_dir / "python"
    for missing in ("pyspark", "pyarrow"):
        assert _run([python, "-c", f"import {missing}"]).returncode != 0, f"{missing} was installed"
    _checked([python, "-c", IMPORT_ALL], cwd=tmp_path)
    assert "usage: sluice COMMAND" in _checked([bin_dir / "sluice", "--help"], cwd=tmp_path)
    assert "--data-dir" in _checked([bin_dir / "sluice", "broker", "--help"], cwd=tmp_path)

    with _running_broker(bin_dir, tmp_path) as servers:
        assert _checked([python, "-c", PRODUCE_AND_CONSUME, servers], cwd=tmp_path).strip() == "['from a fresh venv']"


def test_a_failed_build_of_the_c_extension_says_why_in_one_line(tmp_path):
    """wire._columns has no pure-Python fallback, so the install stops, saying why."""
    built = _build(_source_copy(tmp_path / "source"), tmp_path / "dist", env=dict(os.environ, CC="/bin/false"))
    assert built.returncode != 0
    assert ("sluice: cannot build its C extension wire._columns (command '/bin/false' failed with exit code 1): "
            "it needs a C compiler and the Python headers (on Debian: apt install gcc python3-dev)"
            ) in built.stdout + built.stderr


# A Spark job of a user who installed 'sluice[spark]': format("sluice") and SQL's USING
# sluice with no register() call; argv: bootstrap servers.
SPARK_JOB = """
import sys
from pyspark.sql import SparkSession
from pyspark.errors import AnalysisException

servers = sys.argv[1]
spark = SparkSession.builder.getOrCreate()
rows = spark.createDataFrame([("k1", "one"), ("k2", "two")], "key string, value string")
rows.write.format("sluice").mode("append").option("kafka.bootstrap.servers", servers).option("topic", "job").save()
read = spark.read.format("sluice").option("kafka.bootstrap.servers", servers).option("subscribe", "job").load()
print("read:", sorted(row.value for row in read.selectExpr("CAST(value AS STRING) AS value").collect()))

spark.sql(f"CREATE TEMPORARY VIEW job_view USING sluice OPTIONS ('kafka.bootstrap.servers' '{servers}', "
          "'subscribe' 'job', 'topic' 'job')")
spark.sql("INSERT INTO job_view BY NAME SELECT CAST('k3' AS BINARY) AS key, CAST('three' AS BINARY) AS value")
print("view:", sorted(row.value for row in spark.sql("SELECT CAST(value AS STRING) AS value FROM job_view").collect()))

spark.sql(f"CREATE TABLE job_table USING sluice OPTIONS ('kafka.bootstrap.servers' '{servers}', 'subscribe' 'job')")
try:
    spark.sql("SELECT * FROM job_table").collect()
except AnalysisException as exc:
    print("table:", "use CREATE TEMPORARY VIEW ... USING sluice" in str(exc))

# What register() adds: the default save mode (ErrorIfExists) taken as Append.
def save_in_default_mode():
    rows.write.format("sluice").option("kafka.bootstrap.servers", servers).option("topic", "job").save()
try:
    save_in_default_mode()
except AnalysisException as exc:
    print("default mode:", exc.getCondition())
import spark_connector
spark_connector.register(spark)
save_in_default_mode()
print("registered default mode:", spark.read.format("sluice").option("kafka.bootstrap.servers", servers)
      .option("subscribe", "job").load().count())
spark.stop()
"""


@pytest.mark.long  # pyspark installed into a fresh environment and a spark-submit run, half a minute: `make test-long`
def test_spark_installs_as_an_extra_and_finds_format_sluice_with_no_register_call(tmp_path):
    bin_dir = _install(tmp_path, {"spark"})
    located = _checked([bin_dir / "python", "-c", "import pyspark_sluice; print(pyspark_sluice.__file__)"], cwd=tmp_path)
    assert located.startswith(str(tmp_path / "venv")), located
    (tmp_path / "job.py").write_text(SPARK_JOB)
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("SPARK_", "PYSPARK_")) and key != "PYTHONPATH"}
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=str(bin_dir / "python"),
               PYSPARK_DRIVER_PYTHON=str(bin_dir / "python"))
    with _running_broker(bin_dir, tmp_path) as servers:
        output = _checked([bin_dir / "spark-submit", "--master", "local[1]", "--conf", "spark.ui.enabled=false",
                           "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
                           "--conf", "spark.ui.showConsoleProgress=false", "job.py", servers], cwd=tmp_path, env=env)
    lines = [line for line in output.splitlines() if line.startswith(("read:", "view:", "table:", "default mode:", "registered"))]
    assert lines == ["read: ['one', 'two']", "view: ['one', 'three', 'two']", "table: True",
                     "default mode: UNSUPPORTED_DATA_SOURCE_SAVE_MODE", "registered default mode: 5"], output
