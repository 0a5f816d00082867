"""fminfra's own policy rules: what no public pack checks.

Each rule is a small pure function over one CloudFormation resource (and its template, for
references), named for what it checks, returning a message when the resource breaks it. A
resource may acknowledge a rule with a reason in its metadata:
`Metadata: {"fminfra:acknowledge": [{"id": "<rule id>", "reason": "..."}]}`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Resource = dict[str, Any]
Template = dict[str, Any]
RuleFunction = Callable[[str, Resource, Template], "str | None"]


@dataclass(frozen=True)
class Rule:
    id: str
    resource_types: tuple[str, ...]
    check: RuleFunction
    description: str


@dataclass(frozen=True)
class Finding:
    rule_id: str
    template: str
    logical_id: str
    message: str

    def __str__(self) -> str:
        return f"{self.template}: {self.logical_id}: {self.rule_id}: {self.message}"


RULES: list[Rule] = []


def rule(rule_id: str, *resource_types: str) -> Callable[[RuleFunction], RuleFunction]:
    """Register a rule for the given resource types; its docstring is its description."""

    def register(fn: RuleFunction) -> RuleFunction:
        RULES.append(Rule(rule_id, resource_types, fn, (fn.__doc__ or "").strip()))
        return fn

    return register


def _acknowledged(resource: Resource, rule_id: str) -> bool:
    acks = (resource.get("Metadata") or {}).get("fminfra:acknowledge") or []
    return any(a.get("id") == rule_id and a.get("reason") for a in acks)


# Key under which check_templates hands each rule the exports of all templates checked together
# (export name -> (exporting template, exported value)), so that a rule can follow Fn::ImportValue
# into the stack that owns a resource (a file system's subnet lives in the Network stack).
EXPORTS_KEY = "fminfra:exports"
