"""The documentation site in docs/ against the code: it builds with no broken link and no
page left out of its navigation, the pages generated from the code are current, and every
`sluice` command, flag and Spark option is documented."""

from __future__ import annotations

import argparse
import importlib
import re
import subprocess
import sys
from pathlib import Path

from broker.handlers import reference as apis_reference
from sluice.cli import COMMANDS
from spark_connector import options

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"


def docs_text() -> str:
    return "\n".join(page.read_text() for page in sorted(DOCS.glob("*.md")))


def test_the_site_builds_strictly(tmp_path):
    """mkdocs.yml turns omitted pages, broken links and anchors into warnings, which
    --strict makes errors."""
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=120, cwd=REPO)
    assert build.returncode == 0, build.stderr
    assert (tmp_path / "apis" / "index.html").exists()


def test_the_readme_links_to_files_that_exist():
    """The README is read outside the site (on the repository's page), so mkdocs does not check it."""
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", (REPO / "README.md").read_text())
    assert links and not [link for link in links if not (REPO / link).exists()]


def test_the_apis_page_is_the_api_versions_answer():
    """docs/apis.md is generated from the single node's and a cluster broker's ApiVersions
    answers: after serving another API or version, `python -m broker.handlers --reference > docs/apis.md`."""
    assert (DOCS / "apis.md").read_text() == apis_reference()


def commands_and_flags(prefix: str, parser: argparse.ArgumentParser):
    """(command, flag) for each long flag of the parser and of its subcommands, recursively."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, subparser in action.choices.items():
                yield from commands_and_flags(f"{prefix} {name}", subparser)
        else:
            yield from ((prefix, flag) for flag in action.option_strings
                        if flag.startswith("--") and flag != "--help")
    yield prefix, None


def test_every_sluice_command_and_flag_is_documented():
    text = docs_text()
    missing = []
    for command, module in COMMANDS.items():
        for words, flag in commands_and_flags(f"sluice {command}", importlib.import_module(module).parser()):
            if flag is None:
                if not re.search(r"\b" + re.escape(words.split()[-1]) + r"\b", text):
                    missing.append(words)
            elif not re.search(re.escape(flag) + r"(?![\w-])", text):
                missing.append(f"{words} {flag}")
    assert not [command for command in COMMANDS if f"sluice {command}" not in text]
    assert not missing, f"not in docs/: {missing}"


def test_every_spark_option_is_documented():
    """The options the connector takes, and those it refuses by name, as spark_connector.options
    lists them (Spark's option names are case-insensitive)."""
    text = docs_text().lower()
    names = {*options._SOURCE_OPTIONS, *options._SOURCE_KAFKA, *options._SINK_KNOWN, *options._FORBIDDEN}
    assert not sorted(name for name in names if f"`{name.lower()}`" not in text)
