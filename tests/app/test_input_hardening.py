"""Input that never crashes the tools: fixed hostile inputs through every verb that reads a config,
and property-based tests (hypothesis) that feed arbitrary YAML documents and mutated valid configs
to the loader, the validator and `plan`, in-process: a clean result or a clean error, never an
exception. Bounded: a fixed number of examples and no deadline (about 10 s each on 2 cores)."""

from __future__ import annotations

import contextlib
import copy
import io
import os
import string
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fminfra.cli.main import main
from fminfra.config import format_warnings, load_config, parse_config
from fminfra.core.errors import ConfigError
from fminfra.core.rules import MAX_CONFIG_BYTES, MAX_INT_DIGITS, MAX_NESTING
from tests.conftest import ROOT

DEV_TEXT = (ROOT / "config" / "dev.yaml").read_text()
DEV = yaml.safe_load(DEV_TEXT)

HOSTILE: dict[str, tuple[str, str]] = {
    # name: (file text, what the one line says)
    "list-key": ("? [a, b]\n: c\n", "line 1: invalid YAML: a mapping key must be a plain value such as a name, got a list"),
    "mapping-key": ("? {a: 1}\n: c\n", "line 1: invalid YAML: a mapping key must be a plain value such as a name, got a mapping"),
    "deep-list": ("[" * 20_000 + "]" * 20_000 + "\n", f"line 1: invalid YAML: nested deeper than {MAX_NESTING} levels"),
    "deep-mapping": ("{a: " * 20_000 + "1" + "}" * 20_000 + "\n", f"line 1: invalid YAML: nested deeper than {MAX_NESTING} levels"),
    "huge-int": ("name: " + "9" * 5001 + "\n", f"line 1: invalid YAML: an integer of 5001 digits; at most {MAX_INT_DIGITS} are accepted"),
    "merge-key": (
        "base: &b {cidr: 10.0.0.0/16}\nnetwork:\n  <<: *b\n",
        "line 3: invalid YAML: anchors, aliases and merge keys (&name, *name, <<) are not supported: write the values out",
    ),
    "inline-merge": (
        "network:\n  <<: {cidr: 10.0.0.0/16}\n",
        "line 2: invalid YAML: anchors, aliases and merge keys (&name, *name, <<) are not supported: write the values out",
    ),
    "aliases": ("a: &x [1, 2]\nb: [*x, *x, *x]\n", "line 2: invalid YAML: anchors, aliases and merge keys"),
    "not-utf8": ("\udcff", "(file): cannot read"),
    "too-big": (
        "# " + "x" * MAX_CONFIG_BYTES + "\n",
        f"(file): {MAX_CONFIG_BYTES + 3:,} bytes; a config file may have at most {MAX_CONFIG_BYTES:,}",
    ),
    "aws-tag-key": (
        DEV_TEXT.replace("tags: {team: ml-platform", "tags: {aws:team: ml-platform"),
        "tags['aws:team']: tag keys starting with aws: are reserved for AWS",
    ),
    "long-tag-value": (
        DEV_TEXT.replace("team: ml-platform", "team: " + "v" * 300),
        "tags['team']: a tag value has 1 to 256 characters, got 300",
    ),
    "public-cidr": (
        DEV_TEXT.replace("cidr: 10.0.0.0/16", "cidr: 8.8.0.0/16"),
        "network.cidr: must lie in a private (RFC 1918) range: 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16; got 8.8.0.0/16",
    ),
}
VERBS = [["validate"], ["plan"], ["guard"], ["preflight"], ["grafana", "sync"]]


def _write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8", errors="surrogateescape"))
    return path


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_file_is_one_line_and_exit_2_in_every_verb(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    text, expected = HOSTILE[case]
    path = _write(tmp_path / "env.yaml", text)
    for verb in VERBS:
        assert main([*verb, str(path)]) == 2, verb
        captured = capsys.readouterr()
        assert captured.out == "", verb
        lines = captured.err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"{path}: ") and expected in lines[0], (verb, captured.err[:500])
    # gate reads a folder of configs
    assert main(["gate", "--config-dir", str(tmp_path), "--outdir", str(tmp_path / "cdk.out")]) == 2
    assert expected in capsys.readouterr().err


def test_a_valid_config_still_loads() -> None:
    assert load_config(ROOT / "config" / "dev.yaml").name == "dev"
    assert parse_config(DEV).network.cidr == "10.0.0.0/16"


# --------------------------------------------------------------------------------------------
# property-based: arbitrary documents and mutated valid configs

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["p5.48xlarge", "usw2-az1", "10.0.0.0/16", "on-demand", "slurm", "eks", "", "-1", "1e400", "0x10", "~"]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(st.text(max_size=12), children, max_size=4)),
    max_leaves=20,
)
_YAML_TEXT = st.one_of(
    _VALUES.map(lambda v: yaml.safe_dump(v, allow_unicode=True)),
    st.text(alphabet=string.printable + "\u00e9\u2028\ufeff", max_size=300),
    st.lists(
        st.sampled_from(
            [
                "a:",
                " b",
                "- c",
                "? ",
                "[",
                "]",
                "{",
                "}",
                "&x",
                "*x",
                "<<:",
                "!!python/object",
                "\n",
                "  ",
                "'",
                '"',
                "%YAML 1.1",
                "---",
                "...",
            ]
        ),
        max_size=30,
    ).map("".join),
)
PROPERTY = settings(
    max_examples=int(os.environ.get("FMINFRA_HYPOTHESIS_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
)


def _validate_text(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(Path(tmp) / "env.yaml", text)
        try:
            cfg = load_config(path)
        except ConfigError as exc:
            assert exc.problems and all(p.startswith(f"{path}: ") and "\n" not in p for p in exc.problems), exc.problems
            return
        format_warnings(path, cfg)


@PROPERTY
@given(_YAML_TEXT)
def test_any_yaml_document_loads_or_fails_cleanly(text: str) -> None:
    _validate_text(text)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


_PATHS = _paths(DEV)[1:]


@st.composite
def _mutated_dev(draw: st.DrawFn) -> dict[str, Any]:
    data = copy.deepcopy(DEV)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(_PATHS))
        parent: Any = data
        try:
            for part in path[:-1]:
                parent = parent[part]
            action = draw(st.sampled_from(["replace", "delete", "add"]))
            if action == "delete" and isinstance(parent, dict):
                parent.pop(path[-1], None)
            elif action == "add" and isinstance(parent, dict):
                parent[draw(st.text(max_size=10))] = draw(_VALUES)
            else:
                parent[path[-1]] = draw(_VALUES)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or retyped this path
    return data


@PROPERTY
@given(_mutated_dev())
def test_mutated_valid_configs_validate_and_plan_or_fail_cleanly(data: dict[str, Any]) -> None:
    try:
        cfg = parse_config(data, "dev.yaml")
    except ConfigError as exc:
        assert exc.problems and all(p.startswith("dev.yaml: ") and "\n" not in p for p in exc.problems), exc.problems
        return
    format_warnings("dev.yaml", cfg)
    # what survives validation goes through `plan` (text written back as YAML, read by the CLI)
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(Path(tmp) / "env.yaml", yaml.safe_dump(data))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["plan", str(path)])
        assert code in (0, 1, 2), err.getvalue()
        assert "Traceback" not in err.getvalue()
