"""The facts pages (docs/facts/): every citation resolves, every entry is complete, and nothing in the
repository points at a file outside it.

A citation is `docs/facts/<topic>.md#<anchor>` anywhere in a tracked text file; an entry is a
`### <anchor>` heading followed by the Fact, Used by, Source and Checked lines.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.source_files import source_files

ROOT = Path(__file__).resolve().parents[2]
FACTS = ROOT / "docs" / "facts"
CITATION = re.compile(r"docs/facts/([a-z0-9-]+\.md)#([a-z0-9-]+)")
FIELDS = ("- **Fact:**", "- **Used by:**", "- **Source:**", "- **Checked:**")
# A path on the machine that wrote the code, or the scratch notes of an earlier session.
# Written with escapes so that this file does not match itself under `git grep`.
OUTSIDE = re.compile(r"(/w\x6frk/|\.\./shared/|shared/r\x65ference/|aws-gpu-f\x61cts|f\x61cts \u00a7)")


def tracked_text_files() -> list[Path]:
    # with or without .git: CodePipeline's source has none (tests/source_files.py)
    suffixes = {".py", ".md", ".sh", ".env", ".tsv", ".yaml", ".yml", ".csv", ".tmpl", ".toml", ".txt", ""}
    paths = [ROOT / name for name in source_files(ROOT) if "__snapshots__" not in name and not name.startswith("baselines/")]
    return [p for p in paths if p.suffix in suffixes and p.is_file()]


def entries(page: Path) -> dict[str, str]:
    """anchor -> the entry's text, for one facts page."""
    found: dict[str, str] = {}
    for block in re.split(r"(?m)^(?=### )", page.read_text(encoding="utf-8"))[1:]:
        anchor = block.splitlines()[0][4:].strip()
        found[anchor] = block
    return found


def all_entries() -> dict[tuple[str, str], str]:
    """Every entry of every topic page (README.md holds the format and its example, not entries)."""
    pages = [p for p in sorted(FACTS.glob("*.md")) if p.name != "README.md"]
    return {(page.name, anchor): text for page in pages for anchor, text in entries(page).items()}


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def broken_citations(files: list[Path], known: set[tuple[str, str]]) -> list[str]:
    out = []
    for path in files:
        for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for page, anchor in CITATION.findall(line):
                if (page, anchor) not in known:
                    out.append(f"{_shown(path)}:{lineno}: docs/facts/{page}#{anchor} does not exist")
    return out


def test_every_citation_resolves() -> None:
    files = [p for p in tracked_text_files() if p != Path(__file__).resolve()]
    assert broken_citations(files, set(all_entries())) == []


def test_a_broken_citation_is_reported(tmp_path: Path) -> None:
    """A test of the test: a citation of an anchor that no page has is found."""
    bad = tmp_path / "x.py"
    bad.write_text("# see docs/facts/storage.md#no-such-fact\n")
    problems = broken_citations([bad], set(all_entries()))
    assert len(problems) == 1 and problems[0].endswith("docs/facts/storage.md#no-such-fact does not exist")


def test_every_entry_is_complete_and_unique() -> None:
    anchors: list[str] = []
    for (page, anchor), text in all_entries().items():
        assert re.fullmatch(r"[a-z0-9-]+", anchor), f"{page}: heading {anchor!r} is not an anchor"
        for field in FIELDS:
            assert field in text, f"docs/facts/{page}#{anchor}: missing {field}"
            # once: a union merge of docs/facts (.gitattributes) can leave a stray line of another entry
            assert text.count(field) == 1, f"docs/facts/{page}#{anchor}: {field} appears {text.count(field)} times"
        checked = re.search(r"- \*\*Checked:\*\* (\d{4}-\d{2}-\d{2})", text)
        assert checked, f"docs/facts/{page}#{anchor}: Checked needs a date"
        anchors.append(anchor)
    assert len(anchors) == len(set(anchors)), "an anchor is used on two pages"


def test_a_stray_field_line_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test of the test: an entry left with a second Source line by a merge fails."""
    page = tmp_path / "facts" / "x.md"
    page.parent.mkdir()
    fields = "\n".join(f"{f} a" for f in FIELDS).replace("Checked:** a", "Checked:** 2026-11-30, verified")
    page.write_text(f"# x\n\n### one-fact\n{fields}\n- **Source:** stray\n")
    monkeypatch.setattr(sys.modules[__name__], "FACTS", page.parent)
    with pytest.raises(AssertionError, match="Source:\\*\\* appears 2 times"):
        test_every_entry_is_complete_and_unique()


def test_nothing_refers_to_a_path_outside_the_repository() -> None:
    hits = []
    for path in tracked_text_files():
        if path == Path(__file__).resolve():
            continue
        for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()[:120]}")
    assert hits == []
