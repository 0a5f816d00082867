"""Every rule written once: rule constants live in their concept's `rules` module, no message stands
twice in the package, and validators read the config without changing it (fminfra/core/rules.py)."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "fminfra"

# A module-level name that holds a rule: a compiled pattern, a `Pattern`, or a limit or pattern by its name.
RULE_NAME = re.compile(r"(_RULE$|^MAX_|_MAX$|_MAX_|^MIN_|_MIN$)")
# Files that may define patterns outside a rules module, and why.
NOT_RULES = {
    # The Lambda handler runs with its own folder only and cannot import fminfra; its patterns are the
    # construct's (test_the_handler_checks_the_rules_patterns).
    "hyperpod/constructs/dependencies_handler/index.py": "a Lambda handler's own copy",
    # Parsers of what other programs print, not rules of fminfra's inputs.
    "ops/accept/node/results.py": "parses nccl-tests, torchrun and fio output",
    "ops/guard/replacements.py": "parses ${...} references of Fn::Sub",
    "core/versions.py": "the format of scripts/node/versions.env, which the node scripts read too",
    "core/regions.py": "the AZ ID form, below every concept (core)",
}
# Names that read as limits but are settings of how fminfra itself runs, not rules of an input.
SETTINGS = {
    "compute/constructs/node_bootstrap.py": ("_MAX_BACKOFF_S",),  # the node scripts' retry backoff
    "ops/accept/remote.py": ("MAX_SILENT_POLLS",),  # how long `accept` waits on a silent job
    "ops/plan_topology.py": ("THROTTLE_MAX_BACKOFF_S",),  # plan's retry backoff (botocore's, mirrored)
}
# A message is a string of at least this many characters with a space in it.
MESSAGE_MIN = 40


def _rules_module(rel: str) -> bool:
    parts = rel.split("/")
    return parts[-1] == "rules.py" or "rules" in parts[:-1]


def rule_constants(source: str) -> list[tuple[str, int]]:
    """(name, line) of each module-level rule constant a module defines (an alias of one is no definition)."""
    found = []
    for node in ast.parse(source).body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        names = [t.id for t in targets if isinstance(t, ast.Name)] + [
            e.id for t in targets if isinstance(t, ast.Tuple) for e in t.elts if isinstance(e, ast.Name)
        ]
        if not names or value is None or isinstance(value, (ast.Name, ast.Attribute)):
            continue
        compiled = isinstance(value, ast.Call) and ast.unparse(value.func) in ("re.compile", "Pattern")
        text = isinstance(value, ast.JoinedStr) or (isinstance(value, ast.Constant) and isinstance(value.value, str))
        found += [(name, node.lineno) for name in names if compiled or (RULE_NAME.search(name) and not text)]
    return found


def test_rule_constants_live_in_rules_modules() -> None:
    misplaced = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if _rules_module(rel) or rel in NOT_RULES:
            continue
        misplaced += [
            f"fminfra/{rel}:{line}: {name}" for name, line in rule_constants(path.read_text()) if name not in SETTINGS.get(rel, ())
        ]
    assert not misplaced, "rule constants belong in their concept's rules module (fminfra/core/rules.py):\n" + "\n".join(misplaced)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('import re\nNAME_RULE = re.compile(r"^[a-z]+$")\n', ["NAME_RULE"]),
        ('import re\n_PRIVATE = re.compile(r"^x$")\n', ["_PRIVATE"]),
        ("from fminfra.core.rules import Pattern\nNAME = Pattern('^a$', 'a')\n", ["NAME"]),
        ("MAX_INSTANCES = 6758\nTEAM_NAME_MAX: int = 40\n", ["MAX_INSTANCES", "TEAM_NAME_MAX"]),
        ("from fminfra.hyperpod.rules import MAX_INSTANCES\nHYPERPOD_MAX_INSTANCES = MAX_INSTANCES\n", []),
        ('CDK_VALIDATE_RULE = "CloudFormation-Validate::E3644"\nTIMEOUT = 30\n', []),
    ],
)
def test_a_rule_constant_outside_a_rules_module_is_found(source: str, expected: list[str]) -> None:
    assert [name for name, _ in rule_constants(source)] == expected


def messages(source: str) -> list[tuple[str, int]]:
    """(text, line) of each string of the module that reads as a message: at least MESSAGE_MIN
    characters with a space, f-strings with their fields as {}; docstrings left out."""
    tree = ast.parse(source)
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            skip.add(id(body[0].value))
        if isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            text = node.value
        else:
            continue
        text = text.strip()
        if len(text) >= MESSAGE_MIN and " " in text:
            out.append((text, node.lineno))
    return out


def test_no_message_is_written_twice() -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        for text, line in messages(path.read_text()):
            seen[text].append(f"fminfra/{path.relative_to(PACKAGE).as_posix()}:{line}")
    twice = {text: where for text, where in seen.items() if len(where) > 1}
    assert not twice, "each message once (a constant or a function both places call):\n" + "\n".join(
        f"{text[:80]!r}: {', '.join(where)}" for text, where in twice.items()
    )


def test_a_message_written_twice_is_found() -> None:
    source = (
        'def a(v):\n    raise ValueError(f"must be 1-63 letters, digits and hyphens, got {v!r}")\n'
        'def b(v):\n    """A docstring long enough to be a message, which is not one."""\n'
        '    raise ValueError(f"must be 1-63 letters, digits and hyphens, got {v}")\n'
    )
    found = [text for text, _ in messages(source)]
    assert found == ["must be 1-63 letters, digits and hyphens, got {}", "must be 1-63 letters, digits and hyphens, got {}"]


def mutations_in_validators(source: str) -> list[tuple[str, int]]:
    """(validator, line) where a pydantic validator assigns to its model or calls setattr."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef):
            continue
        decorators = [ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list]
        if not any(d.endswith(("model_validator", "field_validator")) for d in decorators):
            continue
        for inner in ast.walk(node):
            targets = (
                inner.targets
                if isinstance(inner, ast.Assign)
                else [inner.target]
                if isinstance(inner, ast.AugAssign | ast.AnnAssign)
                else []
            )
            if any(isinstance(t, ast.Attribute) for t in targets) or (
                isinstance(inner, ast.Call) and ast.unparse(inner.func) in ("setattr", "object.__setattr__")
            ):
                found.append((node.name, inner.lineno))
    return found


def test_validators_only_read() -> None:
    # Defaults that depend on other fields are applied before validation (fminfra/config/defaults.py).
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += [
            f"fminfra/{path.relative_to(PACKAGE).as_posix()}:{line}: {name}" for name, line in mutations_in_validators(path.read_text())
        ]
    assert not found, "validators return findings and never change the config:\n" + "\n".join(found)


def test_a_validator_that_fills_a_default_is_found() -> None:
    source = (
        "from pydantic import model_validator\n"
        "class C:\n"
        "    @model_validator(mode='after')\n"
        "    def _rules(self):\n"
        "        if self.slurm is None:\n"
        "            self.slurm = SlurmConfig()\n"
        "        return self\n"
        "    def helper(self):\n"
        "        self.cache = 1\n"
    )
    assert mutations_in_validators(source) == [("_rules", 6)]


def test_the_handler_checks_the_rules_patterns() -> None:
    # The dependency handler runs in Lambda without fminfra; its commit pattern is the construct's.
    from fminfra.hyperpod.constructs.dependencies_handler import index
    from fminfra.hyperpod.rules import COMMIT

    assert index.COMMIT_RULE.pattern == COMMIT.expression
