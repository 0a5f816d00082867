"""scripts/bench_test.py, without running `make test`: what it reads from pytest's output and how it
refuses bad arguments (the figures themselves are in docs/testing.md, never asserted)."""

from __future__ import annotations

import subprocess
import sys

from tests.ci import load_script
from tests.conftest import ROOT

SCRIPT = ROOT / "scripts" / "bench_test.py"
bench_test = load_script(SCRIPT)


def test_the_summary_line_gives_the_count_and_seconds() -> None:
    line = "=============== 2122 passed, 7 warnings in 461.92s (0:07:41) ==============="
    match = bench_test._SUMMARY.search(f"...\n{line}\n")
    assert match and (match.group(2), match.group(3)) == ("2122", "461.92")
    # a test of the test: a run that failed tests has no "passed ... in" summary to read as a pass
    assert bench_test._SUMMARY.search("==== 3 failed in 2.00s ====") is None


def test_runs_below_one_is_one_line() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--runs", "0"], capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith("--runs: at least 1, got 0")
    assert "Traceback" not in result.stderr
