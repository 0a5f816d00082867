"""Run a `tests/promtool/*.test.yaml` unit test against another text of its rule file: how the tests
of the tests show that a broken rule fails its promtool test."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml


def promtool_test_with(tmp_path: Path, test_file: Path, rule_text: str, rule_name: str) -> subprocess.CompletedProcess[str]:
    """`promtool test rules` of `test_file` with `rule_text` as its one rule file (written to tmp_path/rule_name)."""
    rules = tmp_path / rule_name
    rules.write_text(rule_text)
    test = yaml.safe_load(test_file.read_text(encoding="utf-8"))
    test["rule_files"] = [str(rules)]
    (tmp_path / "unit.test.yaml").write_text(yaml.safe_dump(test, width=1000))
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: `make setup` installs it (Debian package prometheus)"
    return subprocess.run([promtool, "test", "rules", "unit.test.yaml"], cwd=tmp_path, capture_output=True, text=True, check=False)
