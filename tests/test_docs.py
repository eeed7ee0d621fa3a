"""The README and docs/ hold together: every relative link leads somewhere, and the README stays
short enough to be read as the front door."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest
from conftest import ROOT

MAX_README_WORDS = 2_000
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", ROOT / "README.zh-CN.md", *DOCS]

FENCE = re.compile(r"^ *(```|~~~).*?^ *\1 *$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.DOTALL)
LINK = re.compile(r"(?<!\\)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$", re.MULTILINE)


def prose(text: str) -> str:
    """The text without fenced code blocks, where a [..](..) is code, not a link."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lower-cased, with everything but
    letters, digits, marks, spaces, hyphens and underscores dropped, spaces made hyphens."""
    text = LINK.sub(lambda m: m.group(1), heading)  # a link's text stays, its target goes
    text = text.replace("`", "").replace("**", "").replace("__", "")
    kept = "".join(
        ch for ch in text.lower()
        if ch in " -_" or unicodedata.category(ch)[0] in "LMN" or unicodedata.category(ch) == "Pc"
    )  # fmt: skip
    return kept.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor on page; repeated headings get -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for match in HEADING.finditer(prose(page.read_text(encoding="utf-8"))):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links(page: Path) -> list[str]:
    text = CODE_SPAN.sub("", prose(page.read_text(encoding="utf-8")))
    targets = [match.group(2) for match in LINK.finditer(text)]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.IGNORECASE)]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page):
    broken = []
    for target in relative_links(page):
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {path}")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file):
            broken.append(f"{target}: {file.name} has no heading with the anchor #{fragment}")
    assert not broken, f"{page.relative_to(ROOT)} has broken links:\n" + "\n".join(broken)


def test_every_docs_page_is_linked_from_the_readme_and_links_back():
    readme_links = {target.partition("#")[0] for target in relative_links(ROOT / "README.md")}
    for page in DOCS:
        assert f"docs/{page.name}" in readme_links, f"the README does not link {page.name}"
        first_line = page.read_text(encoding="utf-8").splitlines()[0]
        assert "(../README.md)" in first_line, f"{page.name} should start with a link back"


def test_the_readme_has_at_most_2000_words():
    # Counted as `wc -w` counts: runs of bytes between ASCII whitespace.
    words = len((ROOT / "README.md").read_bytes().split())
    assert words <= MAX_README_WORDS, (
        f"README.md has {words} words; the front door holds at most {MAX_README_WORDS}: "
        "move the detail into docs/ and link it"
    )


def test_the_slugs_are_githubs():
    assert slug("Debugging tour (VS Code and PyCharm)") == "debugging-tour-vs-code-and-pycharm"
    assert slug("A budget: `--max-cost`") == "a-budget---max-cost"
    assert slug("Other servers' stream habits") == "other-servers-stream-habits"
    assert slug("IDEs, beyond the tour") == "ides-beyond-the-tour"
