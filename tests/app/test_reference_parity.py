"""Reference parity: every role fminfra creates grants what AWS's own reference repositories grant
the same role, for the features the config uses, scoped as narrowly as the reference or more, or
`DIFFERENCES` says why not.

The references are recorded, with their repository, path and commit, in tests/data/reference_iam/
(its README.md lists them). A reference applies to a role of every synthesized config, example and
test config that builds it: the HyperPod execution role (by the cluster's orchestrator, Slurm or
EKS) and the training operator's Pod Identity role.

Scope: where the reference names resources for an action, each resource of each fminfra statement
granting it must fall inside one of them (a CloudFormation parameter of the reference, `${VpcId}`,
stands for one id, so fminfra's `vpc/*` is wider than the reference's `vpc/${VpcId}`); grants of an
AWS managed policy the reference attaches too count as the reference's own.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from moto.iam.aws_managed_policies import aws_managed_policies_data

from tests.conftest import ROOT, Synth
from tests.contract.template import is_intrinsic

REFERENCE_DIR = ROOT / "tests" / "data" / "reference_iam"
REFERENCES = sorted(REFERENCE_DIR.glob("*.json"))

# (reference file stem, action) -> why fminfra does not grant it as the reference does.
DIFFERENCES: dict[tuple[str, str], str] = {
    ("hyperpod-slurm-execution-role", "s3:PutObject"): "the nodes only read the lifecycle scripts (CDK's BucketDeployment writes "
    "them at deploy time); nodes write only to the data bucket's read-write prefixes, where a config has them",
    ("hyperpod-slurm-execution-role", "s3:DeleteObject"): "as s3:PutObject: nothing on a node deletes lifecycle scripts",
}

_PSEUDO = re.compile(r"\$\{AWS::(Region|AccountId|Partition)\}")
_PARAMETER = re.compile(r"\$\{[^}]+\}")
# A deploy-time value in one of fminfra's ARNs: one concrete id.
_ONE_ID = "resolved-id"


@dataclass(frozen=True)
class Grant:
    """One Allow statement of a role: actions, rendered resources, and where it comes from."""

    actions: tuple[str, ...]
    resources: tuple[str, ...]
    managed_policy: str | None = None


def _as_list(value: Any) -> list[Any]:
    return [value] if isinstance(value, str | dict) else list(value or [])


def _render(value: Any, resources: dict[str, Any]) -> str:
    """A resource ARN as it deploys in the commercial partition; a bucket's ARN by its literal name;
    any other deploy-time part as one concrete id."""
    if isinstance(value, str):
        return value
    if is_intrinsic(value):
        (key, arg), *_ = value.items()
        if key == "Ref" and arg == "AWS::Partition":
            return "aws"
        if key == "Fn::Join" and isinstance(arg, list) and len(arg) == 2:
            return str(arg[0]).join(_render(part, resources) for part in arg[1])
        if key == "Fn::GetAtt" and isinstance(arg, list) and arg[1] == "Arn":
            target = resources.get(arg[0]) or {}
            name = (target.get("Properties") or {}).get("BucketName")
            if target.get("Type") == "AWS::S3::Bucket" and isinstance(name, str):
                return f"arn:aws:s3:::{name}"
    return _ONE_ID


def _managed_policy_name(arn: Any) -> str:
    text = _render(arn, {})
    return text.rsplit("/", 1)[-1]


def _managed_grants(name: str) -> list[Grant]:
    data = json.loads(aws_managed_policies_data)
    if name not in data:
        return []
    return [
        Grant(tuple(_as_list(s.get("Action"))), tuple(_as_list(s.get("Resource"))), managed_policy=name)
        for s in data[name]["Document"]["Statement"]
        if s.get("Effect") == "Allow" and "Action" in s
    ]


def role_grants(template: dict[str, Any], role_id: str) -> tuple[list[Grant], list[str]]:
    """Every Allow statement a role carries (inline, attached AWS::IAM::Policy, AWS managed
    policies from moto's copy of AWS's list) and the names of its managed policies."""
    resources = template.get("Resources") or {}
    role = resources[role_id]["Properties"]
    documents = [p["PolicyDocument"] for p in role.get("Policies") or []]
    for resource in resources.values():
        if resource.get("Type") == "AWS::IAM::Policy" and {"Ref": role_id} in resource["Properties"].get("Roles", []):
            documents.append(resource["Properties"]["PolicyDocument"])
    grants = [
        Grant(tuple(_as_list(s.get("Action"))), tuple(_render(r, resources) for r in _as_list(s.get("Resource"))))
        for document in documents
        for s in document.get("Statement", [])
        if s.get("Effect") == "Allow" and "Action" in s
    ]
    managed = [_managed_policy_name(arn) for arn in role.get("ManagedPolicyArns") or []]
    for name in managed:
        grants.extend(_managed_grants(name))
    return grants, managed


def _trust(template: dict[str, Any], role_id: str) -> list[tuple[str, set[str]]]:
    statements = template["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    return [
        (service, set(_as_list(s["Action"])))
        for s in statements
        if s.get("Effect") == "Allow"
        for service in _as_list((s.get("Principal") or {}).get("Service"))
    ]


@dataclass(frozen=True)
class FminfraRole:
    """A role of a synthesized template that a reference applies to."""

    where: str
    template: dict[str, Any]
    role_id: str


def _role_id(arn: Any) -> str | None:
    if isinstance(arn, dict) and "Fn::GetAtt" in arn:
        return str(arn["Fn::GetAtt"][0])
    return None


def roles_for(reference: dict[str, Any], templates: Iterator[tuple[str, dict[str, Any]]]) -> list[FminfraRole]:
    """The roles of the templates that the reference describes."""
    found = []
    for where, template in templates:
        for resource in (template.get("Resources") or {}).values():
            props = resource.get("Properties") or {}
            role_id = None
            if reference["role"] == "hyperpod-execution-role" and resource.get("Type") == "AWS::SageMaker::Cluster":
                orchestrator = "eks" if (props.get("Orchestrator") or {}).get("Eks") else "slurm"
                if orchestrator in reference["orchestrators"]:
                    role_id = _role_id(props["InstanceGroups"][0]["ExecutionRole"])
            elif reference["role"] == "hyperpod-training-operator-role" and resource.get("Type") == "AWS::EKS::PodIdentityAssociation":
                identity = reference["pod_identity"]
                if (props.get("Namespace"), props.get("ServiceAccount")) == (identity["namespace"], identity["service_account"]):
                    role_id = _role_id(props["RoleArn"])
            if role_id is not None:
                found.append(FminfraRole(where, template, role_id))
    return found


def _pattern(resource: str) -> str:
    """A reference resource as an fnmatch pattern: pseudo parameters match anything, any other
    parameter one id (never a wildcard)."""
    return _PARAMETER.sub("[!*]*", _PSEUDO.sub("*", resource))


def _grants_action(grant: Grant, action: str) -> bool:
    return any(fnmatch.fnmatchcase(action.lower(), granted.lower()) for granted in grant.actions)


def parity_problems(reference: dict[str, Any], stem: str, role: FminfraRole) -> list[str]:
    """What the role lacks or grants more widely than the reference, one line each."""
    grants, managed = role_grants(role.template, role.role_id)
    problems = []
    for name in reference["managed_policies"]:
        if name not in managed and (stem, name) not in DIFFERENCES:
            problems.append(f"{role.where}: {role.role_id} lacks the AWS managed policy {name}")
    if reference.get("trust"):
        trust, expected = reference["trust"], set(reference["trust"]["actions"])
        if not any(service == trust["service"] and expected <= actions for service, actions in _trust(role.template, role.role_id)):
            problems.append(f"{role.where}: {role.role_id} is not assumable by {trust['service']} with {', '.join(sorted(expected))}")
    patterns: dict[str, set[str]] = {}
    for statement in reference["statements"]:
        for action in statement["actions"]:
            patterns.setdefault(action, set()).update(_pattern(r) for r in statement["resources"])
    for action, allowed in patterns.items():
        if (stem, action) in DIFFERENCES:
            continue
        granting = [g for g in grants if _grants_action(g, action)]
        if not granting:
            problems.append(f"{role.where}: {role.role_id} does not grant {action} ({stem} does)")
            continue
        if "*" in allowed:
            continue
        for grant in granting:
            if grant.managed_policy in reference["managed_policies"]:
                continue
            wider = [r for r in grant.resources if not any(fnmatch.fnmatchcase(r, p) for p in allowed)]
            if wider:
                problems.append(
                    f"{role.where}: {role.role_id} grants {action} on {', '.join(wider)}, wider than {stem}'s {', '.join(sorted(allowed))}"
                )
    return problems


def _reference(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _templates(synth: Synth) -> Iterator[tuple[str, dict[str, Any]]]:
    for stack in synth.all_templates():
        yield stack.display_name, stack.template


def test_every_reference_names_its_source() -> None:
    assert len(REFERENCES) >= 4
    for path in REFERENCES:
        source = _reference(path)["source"]
        assert re.fullmatch(r"[0-9a-f]{40}", source["commit"]), path.name
        assert source["repository"] and source["path"] and source["recorded"], path.name
        assert path.name in (REFERENCE_DIR / "README.md").read_text(encoding="utf-8"), f"{path.name} not in README.md"


@pytest.mark.parametrize("path", REFERENCES, ids=[p.stem for p in REFERENCES])
def test_roles_grant_what_the_reference_grants(synth: Synth, path: Path) -> None:
    reference = _reference(path)
    roles = roles_for(reference, _templates(synth))
    assert roles, f"no synthesized role is the one {path.name} describes"
    problems = [p for role in roles for p in parity_problems(reference, path.stem, role)]
    assert not problems, "\n".join(problems)


def test_every_difference_is_still_one(synth: Synth) -> None:
    """An entry of DIFFERENCES that no synthesized role needs any more goes."""
    by_stem = {p.stem: _reference(p) for p in REFERENCES}
    for stem, action in list(DIFFERENCES):
        reference = by_stem[stem]
        assert any(action in s["actions"] for s in reference["statements"]) or action in reference["managed_policies"], (stem, action)
        saved = DIFFERENCES.pop((stem, action))
        try:
            problems = [p for role in roles_for(reference, _templates(synth)) for p in parity_problems(reference, stem, role)]
        finally:
            DIFFERENCES[(stem, action)] = saved
        assert any(action in p for p in problems), f"{stem}: every role grants {action} as the reference does; drop it from DIFFERENCES"


def _staging_execution_role(synth: Synth) -> tuple[dict[str, Any], FminfraRole, str]:
    path = REFERENCE_DIR / "hyperpod-eks-execution-role.json"
    reference = _reference(path)
    (role,) = roles_for(reference, iter([("staging/Compute", synth.template("staging", "Compute"))]))
    return reference, role, path.stem


def _with_statements(role: FminfraRole, change: Any) -> FminfraRole:
    template = copy.deepcopy(role.template)
    for resource in template["Resources"].values():
        if resource.get("Type") == "AWS::IAM::Policy" and {"Ref": role.role_id} in resource["Properties"]["Roles"]:
            for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
                change(statement)
    return FminfraRole(role.where, template, role.role_id)


def test_the_check_finds_a_removed_action(synth: Synth) -> None:
    reference, role, stem = _staging_execution_role(synth)
    assert parity_problems(reference, stem, role) == []

    def drop(statement: dict[str, Any]) -> None:
        statement["Action"] = [a for a in _as_list(statement["Action"]) if a != "ec2:DescribeDhcpOptions"]

    problems = parity_problems(reference, stem, _with_statements(role, drop))
    assert problems == [f"staging/Compute: {role.role_id} does not grant ec2:DescribeDhcpOptions ({stem} does)"]


def test_the_check_finds_a_wider_resource(synth: Synth) -> None:
    reference, role, stem = _staging_execution_role(synth)

    def widen(statement: dict[str, Any]) -> None:
        if "ec2:CreateNetworkInterface" in _as_list(statement["Action"]):
            statement["Resource"] = "*"

    problems = parity_problems(reference, stem, _with_statements(role, widen))
    assert problems and all("wider than" in p for p in problems)
    assert any("grants ec2:CreateNetworkInterface on *" in p for p in problems)


def test_the_check_finds_a_missing_managed_policy_and_trust(synth: Synth) -> None:
    reference, role, stem = _staging_execution_role(synth)
    template = copy.deepcopy(role.template)
    props = template["Resources"][role.role_id]["Properties"]
    props["ManagedPolicyArns"] = []
    props["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] = {"Service": "ec2.amazonaws.com"}
    problems = parity_problems(reference, stem, FminfraRole(role.where, template, role.role_id))
    assert f"staging/Compute: {role.role_id} lacks the AWS managed policy AmazonSageMakerClusterInstanceRolePolicy" in problems
    assert f"staging/Compute: {role.role_id} is not assumable by sagemaker.amazonaws.com with sts:AssumeRole" in problems


def test_a_parameter_stands_for_one_id() -> None:
    assert fnmatch.fnmatchcase("arn:aws:ec2:us-west-2:1:vpc/vpc-1", _pattern("arn:aws:ec2:${AWS::Region}:${AWS::AccountId}:vpc/${VpcId}"))
    assert not fnmatch.fnmatchcase("arn:aws:ec2:us-west-2:1:vpc/*", _pattern("arn:aws:ec2:${AWS::Region}:${AWS::AccountId}:vpc/${VpcId}"))
    assert fnmatch.fnmatchcase("arn:aws:ec2:us-west-2:1:vpc/*", _pattern("arn:aws:ec2:${AWS::Region}:${AWS::AccountId}:vpc/*"))
