"""fminfra's own policy rules over synthesized templates: `check_templates` runs every rule of
`checks` (registered with `registry.rule`) over every resource. The rules' framework is in
`registry`; a new rule goes in `checks` with its test in tests/policy/test_checks.py."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fminfra.policy.rules import checks as _checks  # noqa: F401  (registers the rules)
from fminfra.policy.rules.registry import EXPORTS_KEY, RULES, Finding, Resource, Rule, RuleFunction, Template, _acknowledged, rule

__all__ = ["EXPORTS_KEY", "RULES", "Finding", "Resource", "Rule", "RuleFunction", "Template", "check_templates", "rule"]


def _exports(templates: dict[str, Template]) -> dict[str, tuple[Template, Any]]:
    out: dict[str, tuple[Template, Any]] = {}
    for template in templates.values():
        for output in (template.get("Outputs") or {}).values():
            name = (output.get("Export") or {}).get("Name")
            if isinstance(name, str):
                out[name] = (template, output.get("Value"))
    return out


def check_templates(templates: dict[str, Template], rules: Iterable[Rule] | None = None) -> list[Finding]:
    """Run the rules over every resource of every template (name -> template JSON)."""
    findings: list[Finding] = []
    exports = _exports(templates)
    for name, plain in sorted(templates.items()):
        template = {**plain, EXPORTS_KEY: exports}
        for logical_id, resource in (template.get("Resources") or {}).items():
            for r in rules if rules is not None else RULES:
                if resource.get("Type") in r.resource_types and not _acknowledged(resource, r.id):
                    message = r.check(logical_id, resource, template)
                    if message:
                        findings.append(Finding(r.id, name, logical_id, message))
    return findings
