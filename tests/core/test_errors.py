"""Construct errors are findings: `ValidationError` carries `Finding`s of level error, the type config
validation and preflight report in (issue 28), and its text is unchanged."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from fminfra.core.errors import ValidationError
from fminfra.core.findings import Finding, error, warning
from fminfra.network.config import NetworkConfig

PACKAGE = Path(__file__).resolve().parents[2] / "fminfra"
# A message that starts with the prop it is about: "count must be 0 or more, got -1".
# Also "storage_capacity_gib {problem}": a prop name (with an underscore) and then the rule's own words.
NAMES_ITS_PROP = re.compile(
    r"^([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*) (?:(?P<verb>must|needs?|is|are|apply|applies|requires?|go|cannot|can|takes?)\b|$)"
)


def test_a_message_is_one_error_finding_and_its_text():
    exc = ValidationError("count must be 0 or more, got -1", path="count")
    assert exc.findings == [Finding("count", "error", "count must be 0 or more, got -1")]
    assert str(exc) == "count must be 0 or more, got -1"


def test_findings_are_carried_whole_and_printed_one_per_line():
    exc = ValidationError([error("a", "first problem"), error("b", "second problem")])
    assert [f.path for f in exc.findings] == ["a", "b"]
    assert str(exc) == "first problem\nsecond problem"


@pytest.mark.parametrize("bad", [[], [warning("a", "only a warning")]])
def test_an_error_without_an_error_finding_is_refused(bad):
    with pytest.raises(TypeError):
        ValidationError(bad)


def test_a_construct_rule_reaches_config_validation_as_its_findings():
    """network's subnet plan raises ValidationError; the config reports its findings under `cidr`."""
    with pytest.raises(ValueError) as info:
        NetworkConfig(cidr="10.0.0.0/24", az_ids=["usw2-az1", "usw2-az2"], compute_az_id="usw2-az1")
    assert "cidr" in str(info.value)


def _raises_without_path(source: str, rel: str) -> list[str]:
    """`raise ValidationError("<prop> must ...")` calls that do not say which prop (path=)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
            continue
        call = node.exc
        if getattr(call.func, "id", None) != "ValidationError" or not call.args:
            continue
        first = call.args[0]
        if isinstance(first, ast.JoinedStr):
            text = "".join(v.value for v in first.values if isinstance(v, ast.Constant))
            lead = first.values[0].value if first.values and isinstance(first.values[0], ast.Constant) else ""
        elif isinstance(first, ast.Constant) and isinstance(first.value, str):
            text = lead = first.value
        else:
            continue
        match = NAMES_ITS_PROP.match(lead)
        if match and not match.group("verb") and "_" not in match.group(1):
            match = None  # one plain word before a value ("taint {key!r}") is not a prop
        if match and not any(k.arg == "path" for k in call.keywords) and text:
            out.append(f"{rel}:{node.lineno}: {match.group(1)}")
    return out


def test_a_construct_error_that_names_its_prop_carries_it_as_the_path():
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        missing += _raises_without_path(path.read_text(), str(path.relative_to(PACKAGE)))
    assert not missing, "raise ValidationError(..., path=PROP) for these:\n" + "\n".join(missing)


def test_the_path_check_finds_a_raise_without_a_path():
    broken = 'def f(n):\n    raise ValidationError(f"count must be 0 or more, got {n}")\n'
    assert _raises_without_path(broken, "x.py") == ["x.py:2: count"]
    fixed = 'def f(n):\n    raise ValidationError(f"count must be 0 or more, got {n}", path="count")\n'
    assert _raises_without_path(fixed, "x.py") == []
