"""Numeric flags refuse what float() reads but no figure can be: inf and nan (newcomer read r5, C:
`cost --amp-samples-per-second inf` printed $inf, and --json wrote Infinity, which JSON does not have)."""

from __future__ import annotations

import pytest

from fminfra.cli.main import main


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "Infinity"])
@pytest.mark.parametrize("flag", ["--amp-samples-per-second", "--hours-per-month"])
def test_a_non_finite_number_is_one_line(tmp_path: object, capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    assert main(["cost", "dev", "--outdir", str(tmp_path), f"{flag}={value}"]) == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"argument {flag}: must be a finite number, got {value!r}")
