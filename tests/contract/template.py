"""Walking a CloudFormation template: intrinsics, and rendering strings built with Fn::Join."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# Stands in for any value CloudFormation resolves at deploy time.
UNRESOLVED = "<unresolved>"


def is_intrinsic(value: Any) -> bool:
    """A `{"Ref": ...}` or `{"Fn::...": ...}` (or `Condition`) object: resolved at deploy time."""
    if not isinstance(value, dict) or len(value) != 1:
        return False
    key = next(iter(value))
    return key in ("Ref", "Condition") or key.startswith("Fn::")


def render(value: Any) -> str:
    """The string a value becomes in the commercial partition, with every part CloudFormation
    resolves at deploy time (other than the partition) as `UNRESOLVED`."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and is_intrinsic(value):
        (key, arg), *_ = value.items()
        if key == "Ref" and arg == "AWS::Partition":
            return "aws"
        if key == "Fn::Join" and isinstance(arg, list) and len(arg) == 2 and isinstance(arg[1], list):
            return str(arg[0]).join(render(part) for part in arg[1])
        if key == "Fn::Sub" and isinstance(arg, str):
            return arg.replace("${AWS::Partition}", "aws")
    return UNRESOLVED


def _children(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """(path, item) for the members of an object or the items of a list."""
    if isinstance(value, dict):
        for key, sub in value.items():
            yield (f"{path}.{key}" if path else key), sub
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            yield f"{path}[{i}]", sub


def strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, string) for every literal string and every Fn::Join/Fn::Sub, rendered, in a value."""
    if isinstance(value, str):
        yield path, value
    elif is_intrinsic(value) and next(iter(value)) in ("Fn::Join", "Fn::Sub"):
        yield path, render(value)
    else:
        for child, sub in _children(value, path):
            yield from strings(sub, child)


def policy_statements(value: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, statement) for every statement of every IAM policy document in a value: any object
    with a `Statement` list (role, policy, key, bucket and topic policies alike)."""
    if isinstance(value, dict) and isinstance(value.get("Statement"), list):
        for i, statement in enumerate(value["Statement"]):
            if isinstance(statement, dict):
                yield f"{path}.Statement[{i}]", statement
        return
    for child, sub in _children(value, path):
        yield from policy_statements(sub, child)
