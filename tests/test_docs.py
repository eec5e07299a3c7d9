"""The documentation: the generated options page is current, and no relative link is broken.

`nox -s docs` builds docs/ with mkdocs in strict mode, which checks the links between pages; these
tests also cover the README's links into docs/, and run without mkdocs.
"""
from __future__ import annotations

import importlib.util
import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = sorted(DOCS.glob("*.md"))
README_LIMIT = 12 * 1024        # bytes: the README says what the kit is for; the rest is in docs/

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_CODE_SPAN = re.compile(r"(`+).+?\1", re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def _generator():
    spec = importlib.util.spec_from_file_location("gen_options_doc", ROOT / "scripts" / "gen_options_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prose(text: str) -> str:
    """The text with code blocks and code spans removed: a link inside them is an example, not a link."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def _links(path: Path) -> list[str]:
    return _LINK.findall(_prose(path.read_text()))


def _slugs(heading: str) -> set[str]:
    """The anchors a heading may get: mkdocs' (Python-Markdown's toc) and GitHub's (they differ on "- ")."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    words = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return {re.sub(r"[-\s]+", "-", words), words.replace(" ", "-")}


def _anchors(path: Path) -> set[str]:
    found = set()
    for heading in _HEADING.findall(_FENCE.sub("", path.read_text())):
        found |= _slugs(heading)
    return found


def test_the_options_page_is_what_the_generator_writes_now():
    expected = _generator().render()
    page = DOCS / "options.md"
    assert page.exists(), "docs/options.md is missing: run python scripts/gen_options_doc.py"
    assert page.read_text() == expected, (
        "docs/options.md is stale (an option changed in reprokit/cli.py): run python scripts/gen_options_doc.py")


def test_the_options_page_lists_every_option_of_each_verb():
    gen = _generator()
    text = (DOCS / "options.md").read_text()
    for parser in gen.parsers():
        assert f"## {parser.prog}" in text
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}`" in text or f"`{', '.join(action.option_strings)}`" in text, option


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_an_existing_file_and_anchor(path):
    broken = []
    for target in _links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):         # https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        if file_part.startswith("/"):
            broken.append(f"{target} (absolute: write it relative to {path.parent.relative_to(ROOT) or '.'})")
            continue
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target} (no heading with that anchor)")
    assert not broken, f"{path.relative_to(ROOT)}: broken links: " + "; ".join(broken)


def test_the_readme_links_to_every_docs_page():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in _links(README)}
    missing = [p.name for p in PAGES if p.resolve() not in linked and p.name != "index.md"]
    assert not missing, f"README.md links to no docs page {', '.join(missing)}"


def test_every_docs_page_is_in_the_mkdocs_nav():
    config = (ROOT / "mkdocs.yml").read_text()
    nav = set(re.findall(r"^\s*-\s*[^:\n]+:\s*(\S+\.md)\s*$", config, re.M))
    assert nav == {p.name for p in PAGES}, f"mkdocs.yml nav {sorted(nav)} against docs/ {[p.name for p in PAGES]}"


def test_the_readme_stays_short():
    size = len(README.read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes, over {README_LIMIT}: move the detail to a docs/ page"
