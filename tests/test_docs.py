"""The documentation site in docs/ against the code: the pages generated from it are
current."""

from __future__ import annotations

from pathlib import Path

from broker.handlers.api_versions import reference as apis_reference

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_the_apis_page_is_the_api_versions_answer():
    """docs/apis.md is generated from the single node's and a cluster broker's ApiVersions
    answers: after serving another API or version, `python -m broker.handlers --reference > docs/apis.md`."""
    assert (DOCS / "apis.md").read_text() == apis_reference()
