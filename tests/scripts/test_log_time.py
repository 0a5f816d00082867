"""The node and lifecycle scripts stamp their log lines in UTC with bash's own clock (`TZ=UTC0 printf
'%(...)T'`, docs/facts/node-software.md#bash-printf-time-format), whatever the node's time zone: a node
whose TZ is five hours west of UTC (POSIX `EST5`, no zone database needed) still logs UTC."""

from __future__ import annotations

import datetime
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

# Every log function of a node or lifecycle script: (script, the bash that calls it, its line's stamp).
STAMP = r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"
LOGGERS = {
    "scripts/node/lib.sh": (f'source "{ROOT}/scripts/node/lib.sh"; log INFO hello', rf"^{STAMP} bash INFO: hello$"),
    "scripts/lifecycle/mount_fsx.sh": ("", rf"^{STAMP} mount_fsx: hello$"),
    "scripts/lifecycle/setup_containers.sh": ("", rf"^{STAMP} setup_containers: hello$"),
    "scripts/lifecycle/start_slurm.sh": ("", rf"^{STAMP} start_slurm: hello$"),
    "scripts/lifecycle/on_create.sh": ("", rf"^{STAMP} on_create: hello$"),
}


def _log_function(script: Path) -> str:
    """The script's `log` function, as written (one line, or a block up to its closing brace)."""
    text = script.read_text()
    start = text.index("\nlog() {") + 1
    first_line_end = text.index("\n", start)
    if text[start:first_line_end].rstrip().endswith("}"):
        return text[start:first_line_end]
    return text[start : text.index("\n}\n", start) + 2]


def _stamp(script: str, tz: str, body: str | None = None) -> datetime.datetime:
    call, pattern = LOGGERS[script]
    if not call:  # a lifecycle script: its log function alone (the scripts run their main when sourced)
        call = f"{body if body is not None else _log_function(ROOT / script)}\nLOG_FILE=/dev/null; log hello"
    env = {"PATH": os.environ["PATH"], "TZ": tz}
    result = subprocess.run(["bash", "-c", call], env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    match = re.match(pattern, result.stderr.strip().splitlines()[-1])
    assert match, result.stderr
    return datetime.datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


@pytest.mark.parametrize("script", LOGGERS)
def test_log_lines_are_stamped_in_utc_on_a_node_in_another_zone(script: str) -> None:
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    stamp = _stamp(script, "EST5")
    assert before <= stamp <= datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)


def test_a_stamp_without_the_utc_assignment_is_caught() -> None:
    """A test of the test: mount_fsx.sh's log function without `TZ=UTC0` stamps EST5's local time."""
    body = _log_function(ROOT / "scripts/lifecycle/mount_fsx.sh").replace("TZ=UTC0 ", "")
    stamp = _stamp("scripts/lifecycle/mount_fsx.sh", "EST5", body)
    assert datetime.datetime.now(datetime.UTC) - stamp > datetime.timedelta(hours=4)
