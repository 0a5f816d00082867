"""Of the kind of node read B1 (a last line without its newline): every `while read` loop in
scripts/ that reads a file also reads a last line that has no newline (`|| [[ -n $var ]]`), since
`read` returns false on it though it filled the variables. Files from an image are not ours to
trust for a final newline (docs/facts/hyperpod.md#hyperpod-plugstack-no-final-newline)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.conftest import ROOT

WHILE_READ = re.compile(r"\bwhile\b(?P<cond>.*\bread\b.*?);\s*do\b")
FROM_FILE = re.compile(r"^\s*done\s*<\s*[\"$]")  # `done <"$file"`, not `<<<` nor `< <(...)`


def file_reads_without_last_line(text: str) -> list[int]:
    """Line numbers of `while read` loops that read a file and stop before a last line without newline."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        match = WHILE_READ.search(line)
        if not match:
            continue
        indent = len(line) - len(line.lstrip())
        done = next((d for d in lines[i + 1 :] if d.strip().startswith("done") and len(d) - len(d.lstrip()) == indent), "")
        if FROM_FILE.match(done) and not re.search(r"\|\|\s*\[\[\s*-n\s", match.group("cond")):
            found.append(i + 1)
    return found


def test_every_file_read_reads_a_last_line_without_newline() -> None:
    found = {
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "scripts").rglob("*.sh"))
        for n in file_reads_without_last_line(path.read_text())
    }
    assert not found, f"while read loops that skip a last line without newline: {sorted(found)}"


def test_the_check_finds_a_loop_that_skips_the_last_line(tmp_path: Path) -> None:
    broken = 'f() {\n    while read -r kind rest; do\n        echo "$kind"\n    done <"$file"\n}\n'
    assert file_reads_without_last_line(broken) == [2]
    assert file_reads_without_last_line(broken.replace("rest; do", "rest || [[ -n $kind ]]; do")) == []
    # and what it guards against, in bash itself: the plain loop never sees the last line
    conf = tmp_path / "plugstack.conf"
    conf.write_text("required /usr/local/lib/slurm/spank_pyxis.so")
    script = broken + "file=$1; f\n"
    plain = subprocess.run(["bash", "-c", script, "-", str(conf)], capture_output=True, text=True, check=True)
    guarded = subprocess.run(
        ["bash", "-c", script.replace("rest; do", "rest || [[ -n $kind ]]; do"), "-", str(conf)], capture_output=True, text=True, check=True
    )
    assert (plain.stdout, guarded.stdout) == ("", "required\n")
