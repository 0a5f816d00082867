"""Templates with their deploy-time values against the CloudFormation registry schemas.

Every intrinsic in a synthesized template (`Ref`, `Fn::GetAtt`, `Fn::Join`, `Fn::Sub`,
`Fn::ImportValue`, `Fn::Select`, `Fn::Split`, `Fn::If` and its conditions, `Fn::FindInMap`,
`Fn::Base64`, `Fn::GetAZs`, `Fn::Cidr`, pseudo parameters, SSM parameter-typed Parameters) is
resolved to a representative value of the shape CloudFormation gives it at deploy time: a `Ref` to
a resource to its physical id in the documented format (`subnet-` and 17 hex digits, a role name,
a topic ARN), a `Fn::GetAtt` to the attribute's shape (an ARN of the referenced type). Then each
resource's properties are validated against its registry schema, as cfn-lint ships them per
region (patterns, enums, lengths, minimum/maximum, required, types, and cfn-lint's `format`
keywords such as `AWS::EC2::Subnet.Id`). A value that cannot be resolved to a shape (a resource
type or attribute missing from the tables below, an import no stack exports) is a problem, never
a silent pass.

Patterns are searched, not matched, as JSON Schema defines `pattern` (a schema that wants the
whole value anchors it with `^...$`), with the `regex` module for Java's `\\p{..}` classes.

Where AWS's own schema is wrong, `SCHEMA_DEFECTS` names the defect, its source and how fminfra
avoids it; a finding on such a property still fails, with that explanation.

Sources: docs/facts/pipeline.md#cfn-registry-schemas-in-cfn-lint,
docs/facts/pipeline.md#cfn-ref-getatt-return-shapes, docs/facts/pipeline.md#cfn-intrinsic-functions.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib
import ipaddress
import json
import pkgutil
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cfnlint.data.schemas
import cfnlint.rules.formats
import jsonschema
import regex
from cfnlint.rules.formats.FormatKeyword import FormatKeyword

from fminfra.capacity.rules import CUSTOM_RESERVATION_TYPE

SCHEMAS = Path(cfnlint.data.schemas.__file__).parent


# ---- The schemas ------------------------------------------------------------------------------


@functools.cache
def _provider(region: str) -> dict[str, str]:
    """Resource type -> schema file name for one region (cfn-lint's providers/<region>.json)."""
    return json.loads((SCHEMAS / "providers" / f"{region}.json").read_text())


@functools.cache
def _schema_file(name: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / "resources" / f"{name}.json").read_text())


CUSTOM_RESOURCE = "AWS::CloudFormation::CustomResource"
# Custom resources whose Ref and attributes are those of a CloudFormation type (their properties
# are still checked as a custom resource's): fminfra's reservation in a placement group answers as
# `AWS::EC2::CapacityReservation` (docs/facts/capacity.md#cfn-schema-capacity-reservation-placement-group-arn).
ANSWERS_AS = {CUSTOM_RESERVATION_TYPE: "AWS::EC2::CapacityReservation"}


def schema(resource_type: str, region: str) -> dict[str, Any] | None:
    """The registry schema of a resource type in a region; a `Custom::` type is a custom resource."""
    key = CUSTOM_RESOURCE if resource_type.startswith("Custom::") else resource_type
    name = _provider(region).get(key)
    return _schema_file(name) if name else None


def schema_property(resource_schema: dict[str, Any], name: str) -> dict[str, Any] | None:
    """A property's schema (`A.B` for a nested one), `$ref`s followed; None when there is none."""
    node: dict[str, Any] | None = resource_schema
    for part in name.split("."):
        node = (node or {}).get("properties", {}).get(part)
        while node is not None and "$ref" in node:
            node = resource_schema["definitions"][node["$ref"].rsplit("/", 1)[-1]]
    return node


@functools.cache
def formats() -> dict[str, str]:
    """cfn-lint's `format` keywords and their patterns (cfnlint/rules/formats/*.py)."""
    found: dict[str, str] = {}
    for module in pkgutil.iter_modules(cfnlint.rules.formats.__path__):
        loaded = importlib.import_module(f"cfnlint.rules.formats.{module.name}")
        for value in vars(loaded).values():
            if isinstance(value, type) and issubclass(value, FormatKeyword) and value is not FormatKeyword:
                rule = value()
                if rule.format_keyword and rule.pattern:
                    found[rule.format_keyword] = rule.pattern
    return found


def _format_checker() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker(formats=())
    for name, version in (("ipv4-network", 4), ("ipv6-network", 6)):
        checker.checks(name)(lambda value, version=version: not isinstance(value, str) or _is_network(value, version))
    for name, pattern in formats().items():
        compiled = regex.compile(pattern)
        checker.checks(name)(lambda value, compiled=compiled: not isinstance(value, str) or compiled.match(value) is not None)
    return checker


def _is_network(value: str, version: int) -> bool:
    try:
        return ipaddress.ip_network(value, strict=False).version == version
    except ValueError:
        return False


def _pattern(validator: Any, pattern: str, instance: Any, _schema: dict[str, Any]) -> Iterator[jsonschema.ValidationError]:
    if isinstance(instance, str) and regex.search(pattern, instance) is None:
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_BOOLEAN_STRINGS = ("true", "false", "True", "False")


def _scalar_is(kind: str, instance: Any) -> bool:
    """CloudFormation's scalar conversion as cfn-lint models it by default: a string property takes
    any scalar, a number or integer one a numeric string, a boolean one "true"/"false"
    (docs/facts/pipeline.md#cfn-registry-schemas-in-cfn-lint)."""
    if kind in ("object", "array", "null") or instance is None:
        return bool(_Draft7Types.is_type(instance, kind))
    if kind == "string":
        return not isinstance(instance, dict | list)
    if kind == "boolean":
        return isinstance(instance, bool) or instance in _BOOLEAN_STRINGS
    if isinstance(instance, bool | dict | list):
        return False
    try:
        (float if kind == "number" else int)(instance)
    except (TypeError, ValueError):
        return False
    return True


_Draft7Types = jsonschema.Draft7Validator.TYPE_CHECKER


def _type(validator: Any, kinds: Any, instance: Any, _schema: dict[str, Any]) -> Iterator[jsonschema.ValidationError]:
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if not any(_scalar_is(kind, instance) for kind in kinds):
        yield jsonschema.ValidationError(f"{instance!r} is not of type {', '.join(repr(k) for k in kinds)}")


_Validator = jsonschema.validators.extend(jsonschema.Draft7Validator, {"pattern": _pattern, "type": _type})
_FORMATS = _format_checker()


def schema_errors(resource_schema: dict[str, Any], properties: dict[str, Any]) -> list[jsonschema.ValidationError]:
    """Every error of resolved properties against a resource schema, in path order."""
    errors = _Validator(resource_schema, format_checker=_FORMATS).iter_errors(properties)
    return sorted(errors, key=lambda e: (e.json_path, e.validator))


# ---- Known defects in AWS's schemas ---------------------------------------------------------------


@dataclass(frozen=True)
class SchemaDefect:
    """A keyword of AWS's registry schema that no correct value passes, and what fminfra does.

    A finding on it still fails: fminfra must not set this property (`avoidance` says how it
    gets the same effect); the entry explains the failure and is dropped when AWS fixes the schema.
    """

    resource_type: str
    path: str  # JSON path of the property, as jsonschema names it ("$.PlacementGroupArn")
    keyword: str  # the schema keyword at fault ("pattern")
    defect: str
    avoidance: str
    fact: str  # docs/facts/<file>.md#<anchor>
    correct_value: str  # a value the service accepts and the schema refuses: the defect's proof


SCHEMA_DEFECTS = (
    SchemaDefect(
        resource_type="AWS::EC2::CapacityReservation",
        path="$.PlacementGroupArn",
        keyword="pattern",
        defect="the pattern `^arn:aws([a-z-]+)?:ec2:[a-z\\d-]+:\\d{12}:placement-group/^.{1,255}$` has a second `^`, so no ARN matches it",
        avoidance=(
            "fminfra must not set this property: a reservation in a cluster placement group is created through "
            "the EC2 API (CreateCapacityReservation with PlacementGroupArn), not through this resource"
        ),
        fact="docs/facts/capacity.md#cfn-schema-capacity-reservation-placement-group-arn",
        correct_value="arn:aws:ec2:us-west-2:111111111111:placement-group/fminfra-dev-train",
    ),
)


def defect_for(resource_type: str, error: jsonschema.ValidationError) -> SchemaDefect | None:
    for defect in SCHEMA_DEFECTS:
        if (defect.resource_type, defect.path, defect.keyword) == (resource_type, error.json_path, error.validator):
            return defect
    return None


# ---- Deploy-time values -------------------------------------------------------------------------


class Unresolvable(Exception):
    """A value no representative shape is known for: the message says which and what to add."""


@dataclass
class Stack:
    """One deployed stack: its template and where it deploys."""

    name: str
    template: dict[str, Any]
    account: str
    region: str

    @property
    def partition(self) -> str:
        return "aws-cn" if self.region.startswith("cn-") else "aws-us-gov" if self.region.startswith("us-gov-") else "aws"

    @property
    def url_suffix(self) -> str:
        return "amazonaws.com.cn" if self.region.startswith("cn-") else "amazonaws.com"

    @property
    def stack_name(self) -> str:
        """CloudFormation's stack name: `dev/Network` deploys as `dev-Network`."""
        return re.sub(r"[^A-Za-z0-9-]", "-", self.name.removesuffix(".template.json"))

    def resources(self) -> dict[str, dict[str, Any]]:
        return self.template.get("Resources") or {}


def hex_id(seed: str, digits: int = 17) -> str:
    """Lower-case hex digits, the same for the same seed (so a Ref resolves alike everywhere)."""
    return hashlib.sha256(seed.encode()).hexdigest()[:digits]


def _uuid(seed: str) -> str:
    h = hashlib.sha256(seed.encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


@dataclass
class Resource:
    """A resource as a Ref or Fn::GetAtt sees it: its stack, logical id and resolver."""

    stack: Stack
    lid: str
    resource: dict[str, Any]
    resolver: Resolver

    @property
    def seed(self) -> str:
        return f"{self.stack.account}/{self.stack.region}/{self.stack.stack_name}/{self.lid}"

    def hex(self, digits: int = 17, salt: str = "") -> str:
        return hex_id(self.seed + salt, digits)

    def prop(self, name: str) -> Any:
        value = (self.resource.get("Properties") or {}).get(name)
        return None if value is None else self.resolver.resolve(value, self.stack)

    def name(self, prop: str | None, max_len: int, *, lower: bool = False) -> str:
        """The name the template gives, or the one CloudFormation generates: stack name, logical id
        and a random suffix, shortened to fit (docs/facts/pipeline.md#cfn-ref-getatt-return-shapes)."""
        given = self.prop(prop) if prop else None
        if given is not None:
            return str(given)
        suffix = self.hex(12).upper()
        room = max_len - len(suffix) - 2
        stack, lid = self.stack.stack_name[: room // 2], self.lid[: room - room // 2]
        generated = f"{stack}-{lid}-{suffix}"
        return generated.lower() if lower else generated

    def arn(self, service: str, resource: str, *, region: bool = True, account: bool = True) -> str:
        return ":".join(
            ["arn", self.stack.partition, service, self.stack.region if region else "", self.stack.account if account else "", resource]
        )


Shape = Callable[[Resource], Any]


def _prefixed(prefix: str) -> Shape:
    return lambda r: f"{prefix}-{r.hex()}"


def _role_name(r: Resource) -> str:
    return r.name("RoleName", 64)


def _eks_cluster_name(r: Resource) -> str:
    return r.name("Name", 100)


def _lambda_name(r: Resource) -> str:
    return r.name("FunctionName", 64)


def _bucket_name(r: Resource) -> str:
    return r.name("BucketName", 63, lower=True)


def _log_group_name(r: Resource) -> str:
    return r.name("LogGroupName", 512)


def _path(r: Resource) -> str:
    return str(r.prop("Path") or "/")


def _nodegroup_name(r: Resource) -> str:
    return r.name("NodegroupName", 63)


def _placement_group_name(r: Resource) -> str:
    return r.name(None, 255)


def _queue_name(r: Resource) -> str:
    return r.name("QueueName", 80)


def _sagemaker_cluster_id(r: Resource) -> str:
    return r.hex(12, "cluster")


# Ref: resource type -> (the schema property whose value Ref returns, the representative value).
REF_SHAPES: dict[str, tuple[str, Shape]] = {
    "AWS::AutoScaling::AutoScalingGroup": ("AutoScalingGroupName", lambda r: r.name("AutoScalingGroupName", 255)),
    "AWS::CodeBuild::Project": ("Name", lambda r: r.name("Name", 150)),
    "AWS::EC2::CapacityReservation": ("Id", _prefixed("cr")),
    CUSTOM_RESERVATION_TYPE: ("Id", _prefixed("cr")),
    "AWS::EC2::EIP": ("PublicIp", lambda r: f"203.0.113.{int(r.hex(2), 16) % 254 + 1}"),
    "AWS::EC2::InternetGateway": ("InternetGatewayId", _prefixed("igw")),
    "AWS::EC2::LaunchTemplate": ("LaunchTemplateId", _prefixed("lt")),
    "AWS::EC2::NatGateway": ("NatGatewayId", _prefixed("nat")),
    "AWS::EC2::PlacementGroup": ("GroupName", _placement_group_name),
    "AWS::EC2::RouteTable": ("RouteTableId", _prefixed("rtb")),
    "AWS::EC2::SecurityGroup": ("GroupId", _prefixed("sg")),
    "AWS::EC2::Subnet": ("SubnetId", _prefixed("subnet")),
    "AWS::EC2::VPC": ("VpcId", _prefixed("vpc")),
    "AWS::EKS::Cluster": ("Name", _eks_cluster_name),
    "AWS::FSx::FileSystem": ("Id", _prefixed("fs")),
    "AWS::IAM::InstanceProfile": ("InstanceProfileName", lambda r: r.name("InstanceProfileName", 128)),
    "AWS::IAM::OIDCProvider": ("Arn", lambda r: r.arn("iam", f"oidc-provider/{str(r.prop('Url')).removeprefix('https://')}", region=False)),
    "AWS::IAM::Role": ("RoleName", _role_name),
    "AWS::KMS::Alias": ("AliasName", lambda r: str(r.prop("AliasName"))),
    "AWS::KMS::Key": ("KeyId", lambda r: _uuid(r.seed)),
    "AWS::Lambda::Function": ("FunctionName", _lambda_name),
    "AWS::Lambda::LayerVersion": ("LayerVersionArn", lambda r: r.arn("lambda", f"layer:{r.name('LayerName', 64)}:1")),
    "AWS::Logs::LogGroup": ("LogGroupName", _log_group_name),
    "AWS::S3::Bucket": ("BucketName", _bucket_name),
    "AWS::SNS::Topic": ("TopicArn", lambda r: r.arn("sns", r.name("TopicName", 256))),
    "AWS::SSM::Parameter": ("Name", lambda r: r.name("Name", 1011)),
    "AWS::SQS::Queue": ("QueueUrl", lambda r: f"https://sqs.{r.stack.region}.{r.stack.url_suffix}/{r.stack.account}/{_queue_name(r)}"),
}

# Fn::GetAtt: (resource type, attribute) -> the representative value.
GETATT_SHAPES: dict[tuple[str, str], Shape] = {
    ("AWS::APS::Scraper", "Arn"): lambda r: r.arn("aps", f"scraper/s-{_uuid(r.seed)}"),
    ("AWS::APS::Workspace", "Arn"): lambda r: r.arn("aps", f"workspace/ws-{_uuid(r.seed)}"),
    ("AWS::APS::Workspace", "WorkspaceId"): lambda r: f"ws-{_uuid(r.seed)}",
    ("AWS::CodeBuild::Project", "Arn"): lambda r: r.arn("codebuild", f"project/{r.name('Name', 150)}"),
    ("AWS::EC2::EIP", "AllocationId"): _prefixed("eipalloc"),
    ("AWS::EC2::LaunchTemplate", "LatestVersionNumber"): lambda r: "1",
    ("AWS::EC2::LaunchTemplate", "LaunchTemplateId"): _prefixed("lt"),
    ("AWS::EC2::PlacementGroup", "GroupName"): _placement_group_name,
    ("AWS::EC2::PlacementGroup", "GroupId"): _prefixed("pg"),
    ("AWS::EC2::SecurityGroup", "GroupId"): _prefixed("sg"),
    ("AWS::EC2::VPC", "DefaultSecurityGroup"): lambda r: f"sg-{r.hex(salt='default')}",
    ("AWS::EC2::VPC", "CidrBlock"): lambda r: r.prop("CidrBlock"),
    ("AWS::EKS::Cluster", "Arn"): lambda r: r.arn("eks", f"cluster/{_eks_cluster_name(r)}"),
    ("AWS::EKS::Cluster", "ClusterSecurityGroupId"): lambda r: f"sg-{r.hex(salt='cluster')}",
    ("AWS::EKS::Nodegroup", "Arn"): lambda r: r.arn("eks", f"nodegroup/{r.prop('ClusterName')}/{_nodegroup_name(r)}/{_uuid(r.seed)}"),
    ("AWS::EKS::Nodegroup", "NodegroupName"): _nodegroup_name,
    ("AWS::FSx::FileSystem", "DNSName"): lambda r: f"fs-{r.hex()}.fsx.{r.stack.region}.{r.stack.url_suffix}",
    ("AWS::FSx::FileSystem", "LustreMountName"): lambda r: r.hex(8, "mount"),
    ("AWS::Grafana::Workspace", "Id"): lambda r: f"g-{r.hex(10)}",
    ("AWS::Grafana::Workspace", "Endpoint"): lambda r: f"g-{r.hex(10)}.grafana-workspace.{r.stack.region}.{r.stack.url_suffix}",
    ("AWS::IAM::InstanceProfile", "Arn"): lambda r: r.arn(
        "iam", f"instance-profile{_path(r)}{r.name('InstanceProfileName', 128)}", region=False
    ),
    ("AWS::IAM::Role", "Arn"): lambda r: r.arn("iam", f"role{_path(r)}{_role_name(r)}", region=False),
    ("AWS::KMS::Key", "Arn"): lambda r: r.arn("kms", f"key/{_uuid(r.seed)}"),
    ("AWS::Lambda::Function", "Arn"): lambda r: r.arn("lambda", f"function:{_lambda_name(r)}"),
    ("AWS::Logs::LogGroup", "Arn"): lambda r: r.arn("logs", f"log-group:{_log_group_name(r)}:*"),
    ("AWS::ResourceGroups::Group", "Arn"): lambda r: r.arn("resource-groups", f"group/{r.prop('Name')}"),
    ("AWS::S3::Bucket", "Arn"): lambda r: r.arn("s3", _bucket_name(r), region=False, account=False),
    ("AWS::SageMaker::Cluster", "ClusterArn"): lambda r: r.arn("sagemaker", f"cluster/{_sagemaker_cluster_id(r)}"),
    ("AWS::SQS::Queue", "Arn"): lambda r: r.arn("sqs", _queue_name(r)),
    ("AWS::SQS::Queue", "QueueName"): _queue_name,
}

# Parameter types: AWS-specific and SSM parameter types -> the value CloudFormation passes in.
PARAMETER_SHAPES: dict[str, Callable[[str], Any]] = {
    "AWS::EC2::Image::Id": lambda seed: f"ami-{hex_id(seed)}",
    "AWS::EC2::Subnet::Id": lambda seed: f"subnet-{hex_id(seed)}",
    "AWS::EC2::SecurityGroup::Id": lambda seed: f"sg-{hex_id(seed)}",
    "AWS::EC2::VPC::Id": lambda seed: f"vpc-{hex_id(seed)}",
}
# The CDK bootstrap stack's version parameter: a number in a String parameter.
SSM_STRING_VALUES = {"/cdk-bootstrap/hnb659fds/version": "30"}


def _az_names(region: str) -> list[str]:
    return [f"{region}{letter}" for letter in "abc"]


_SUB = re.compile(r"\$\{([^}!][^}]*)\}")


@dataclass
class Resolver:
    """Resolves intrinsics to representative deploy-time values, across stacks for imports."""

    stacks: list[Stack]
    exports: dict[str, tuple[Stack, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for stack in self.stacks:
            for output in (stack.template.get("Outputs") or {}).values():
                if "Export" in output:
                    name = self.resolve(output["Export"]["Name"], stack)
                    self.exports[f"{stack.account}/{stack.region}/{name}"] = (stack, output["Value"])

    def resolve(self, value: Any, stack: Stack) -> Any:
        """The value with every intrinsic resolved; `NO_VALUE` where `AWS::NoValue` removes it."""
        if isinstance(value, list):
            return [v for v in (self.resolve(item, stack) for item in value) if v is not NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                return self._ref(arg, stack)
            if key.startswith("Fn::"):
                return self._function(key, arg, stack)
        return {k: v for k, v in ((k, self.resolve(v, stack)) for k, v in value.items()) if v is not NO_VALUE}

    def _resource(self, lid: str, stack: Stack) -> Resource:
        return Resource(stack, lid, stack.resources()[lid], self)

    def _ref(self, name: str, stack: Stack) -> Any:
        pseudo = {
            "AWS::Partition": stack.partition,
            "AWS::Region": stack.region,
            "AWS::AccountId": stack.account,
            "AWS::URLSuffix": stack.url_suffix,
            "AWS::StackName": stack.stack_name,
            "AWS::StackId": f"arn:{stack.partition}:cloudformation:{stack.region}:{stack.account}:stack/{stack.stack_name}/"
            f"{_uuid(stack.stack_name)}",
            "AWS::NotificationARNs": [],
            "AWS::NoValue": NO_VALUE,
        }
        if name in pseudo:
            return pseudo[name]
        if name.startswith("AWS::"):
            raise Unresolvable(f"Ref {name}: not a pseudo parameter this resolver knows")
        parameters = stack.template.get("Parameters") or {}
        if name in parameters:
            return self._parameter(name, parameters[name], stack)
        if name not in stack.resources():
            raise Unresolvable(f"Ref {name}: no such resource or parameter")
        resource = self._resource(name, stack)
        shape = REF_SHAPES.get(resource.resource["Type"])
        if shape is None:
            raise Unresolvable(f"Ref {name}: no representative value for a Ref to {resource.resource['Type']}; add it to REF_SHAPES")
        return shape[1](resource)

    def _parameter(self, name: str, parameter: dict[str, Any], stack: Stack) -> Any:
        kind = str(parameter.get("Type"))
        seed = f"{stack.account}/{stack.region}/{parameter.get('Default')}"
        ssm = re.fullmatch(r"AWS::SSM::Parameter::Value<(.+)>", kind)
        if ssm:
            inner = ssm.group(1)
            if inner == "String" and parameter.get("Default") in SSM_STRING_VALUES:
                return SSM_STRING_VALUES[parameter["Default"]]
            if inner in PARAMETER_SHAPES:
                return PARAMETER_SHAPES[inner](seed)
            raise Unresolvable(f"Ref {name}: no representative value for an SSM parameter of {inner} ({parameter.get('Default')})")
        if kind in PARAMETER_SHAPES:
            return PARAMETER_SHAPES[kind](seed)
        if kind in ("String", "Number") and "Default" in parameter:
            return parameter["Default"]
        raise Unresolvable(f"Ref {name}: a {kind} parameter without a default or a known shape")

    def _getatt(self, arg: Any, stack: Stack) -> Any:
        lid, attribute = arg.split(".", 1) if isinstance(arg, str) else arg
        attribute = self.resolve(attribute, stack)
        if lid not in stack.resources():
            raise Unresolvable(f"Fn::GetAtt {lid}.{attribute}: no such resource")
        resource = self._resource(lid, stack)
        shape = GETATT_SHAPES.get((resource.resource["Type"], attribute))
        if shape is None:
            raise Unresolvable(
                f"Fn::GetAtt {lid}.{attribute}: no representative value for {resource.resource['Type']}.{attribute}; "
                "add it to GETATT_SHAPES"
            )
        return shape(resource)

    def condition(self, name: str, stack: Stack) -> bool:
        conditions = stack.template.get("Conditions") or {}
        if name not in conditions:
            raise Unresolvable(f"Condition {name}: no such condition")
        return bool(self._condition_value(conditions[name], stack))

    def _condition_value(self, value: Any, stack: Stack) -> Any:
        if isinstance(value, dict) and len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Condition":
                return self.condition(arg, stack)
            if key == "Fn::Equals":
                left, right = (self._condition_value(v, stack) for v in arg)
                return str(left) == str(right)
            if key == "Fn::And":
                return all(self._condition_value(v, stack) for v in arg)
            if key == "Fn::Or":
                return any(self._condition_value(v, stack) for v in arg)
            if key == "Fn::Not":
                return not self._condition_value(arg[0], stack)
        return self.resolve(value, stack)

    def _function(self, key: str, arg: Any, stack: Stack) -> Any:
        if key == "Fn::GetAtt":
            return self._getatt(arg, stack)
        if key == "Fn::Join":
            separator, items = arg
            return str(separator).join(str(v) for v in self.resolve(items, stack))
        if key == "Fn::Sub":
            text, variables = (arg, {}) if isinstance(arg, str) else arg
            values = {k: self.resolve(v, stack) for k, v in variables.items()}

            def one(match: re.Match[str]) -> str:
                name = match.group(1)
                if name in values:
                    return str(values[name])
                if "." in name and not name.startswith("AWS::"):
                    return str(self._getatt(name, stack))
                return str(self._ref(name, stack))

            return _SUB.sub(one, text).replace("${!", "${")
        if key == "Fn::ImportValue":
            name = self.resolve(arg, stack)
            found = self.exports.get(f"{stack.account}/{stack.region}/{name}")
            if found is None:
                raise Unresolvable(f"Fn::ImportValue {name}: no synthesized stack in {stack.account}/{stack.region} exports it")
            return self.resolve(found[1], found[0])
        if key == "Fn::Select":
            index, items = self.resolve(arg, stack)
            return items[int(index)]
        if key == "Fn::Split":
            separator, text = self.resolve(arg, stack)
            return str(text).split(separator)
        if key == "Fn::If":
            name, if_true, if_false = arg
            return self.resolve(if_true if self.condition(name, stack) else if_false, stack)
        if key in ("Fn::Equals", "Fn::And", "Fn::Or", "Fn::Not"):
            return self._condition_value({key: arg}, stack)
        if key == "Fn::FindInMap":
            mapping, top, second, *_ = self.resolve(arg, stack)
            try:
                return stack.template["Mappings"][mapping][top][second]
            except KeyError:
                raise Unresolvable(f"Fn::FindInMap {mapping}.{top}.{second}: not in the template's Mappings") from None
        if key == "Fn::Base64":
            return base64.b64encode(str(self.resolve(arg, stack)).encode()).decode()
        if key == "Fn::GetAZs":
            return _az_names(self.resolve(arg, stack) or stack.region)
        if key == "Fn::Cidr":
            block, count, bits = self.resolve(arg, stack)
            network = ipaddress.ip_network(block)
            return [str(n) for n in list(network.subnets(new_prefix=network.max_prefixlen - int(bits)))[: int(count)]]
        raise Unresolvable(f"{key}: an intrinsic function this resolver does not know")


class _NoValue:
    def __repr__(self) -> str:
        return "AWS::NoValue"


NO_VALUE: Any = _NoValue()


# ---- The check ---------------------------------------------------------------------------------


def problems(stacks: list[Stack], resolver: Resolver | None = None) -> tuple[list[str], dict[str, int]]:
    """(problems, resources validated by type) for every resource of every stack: unresolvable
    values, resource types without a schema in the stack's region, and schema errors of the
    resolved properties (an error on a known schema defect says so)."""
    resolver = resolver or Resolver(stacks)
    found: list[str] = []
    validated: dict[str, int] = {}
    for stack in stacks:
        for lid, resource in stack.resources().items():
            kind = resource["Type"]
            where = f"{stack.name} {lid} ({kind})"
            try:
                if "Condition" in resource and not resolver.condition(resource["Condition"], stack):
                    continue
                properties = resolver.resolve(resource.get("Properties") or {}, stack)
            except Unresolvable as exc:
                found.append(f"{where}: cannot resolve to a deploy-time shape: {exc}")
                continue
            resource_schema = schema(kind, stack.region)
            if resource_schema is None:
                found.append(f"{where}: no registry schema for {kind} in {stack.region}")
                continue
            validated[kind] = validated.get(kind, 0) + 1
            for error in schema_errors(resource_schema, properties):
                defect = defect_for(kind, error)
                text = f"{where} {error.json_path}: {error.message}"
                if defect:
                    text += f" -- AWS's schema defect: {defect.defect} ({defect.fact}); {defect.avoidance}"
                found.append(text)
    return found, validated


def reference_problems(stacks: list[Stack], resolver: Resolver | None = None) -> tuple[list[str], int]:
    """(problems, references checked): every Ref and Fn::GetAtt to a resource, resolved, against the
    schema of the resource it names: the attribute (or the property Ref returns) must be one of
    the schema's properties, and the representative value must pass that property's schema."""
    resolver = resolver or Resolver(stacks)
    found: list[str] = []
    checked = 0
    for stack in stacks:
        resources = stack.resources()
        for lid, attribute, value in _references(stack.template):
            if lid not in resources:
                continue
            target = resources[lid]["Type"]
            name = attribute if attribute is not None else REF_SHAPES.get(target, ("", None))[0]
            where = f"{stack.name} {'Fn::GetAtt' if attribute else 'Ref'} {lid}{'.' + attribute if attribute else ''} ({target})"
            target_schema = schema(ANSWERS_AS.get(target, target), stack.region)
            if target_schema is None:
                continue  # reported by problems()
            if not name or (definition := schema_property(target_schema, name)) is None:
                found.append(f"{where}: {target}'s schema has no property {name or '(none named in REF_SHAPES)'}")
                continue
            try:
                resolved = resolver.resolve(value, stack)
            except Unresolvable as exc:
                found.append(f"{where}: cannot resolve to a deploy-time shape: {exc}")
                continue
            checked += 1
            standalone = {**definition, "definitions": target_schema.get("definitions", {})}
            found += [
                f"{where}: {resolved!r} is not the shape the schema gives {name}: {e.message}" for e in schema_errors(standalone, resolved)
            ]
    return sorted(set(found)), checked


def _references(value: Any) -> Iterator[tuple[str, str | None, Any]]:
    """(logical id, attribute or None, the intrinsic) for each Ref/Fn::GetAtt in a value."""
    if isinstance(value, list):
        for item in value:
            yield from _references(item)
    elif isinstance(value, dict):
        if len(value) == 1 and "Ref" in value and isinstance(value["Ref"], str):
            yield value["Ref"], None, value
        elif len(value) == 1 and "Fn::GetAtt" in value:
            arg = value["Fn::GetAtt"]
            lid, attribute = arg.split(".", 1) if isinstance(arg, str) else arg
            if isinstance(attribute, str):
                yield lid, attribute, value
        else:
            for item in value.values():
                yield from _references(item)


def assembly_stacks(outdir: Path, prefix: str = "") -> list[Stack]:
    """Every stack of a cloud assembly (stages' and the app's own), with the account and region its
    manifest gives (`aws://ACCOUNT/REGION`), named `prefix` + its display name."""
    found: list[Stack] = []
    manifest = json.loads((outdir / "manifest.json").read_text())
    for artifact in (manifest.get("artifacts") or {}).values():
        if artifact.get("type") == "cdk:cloud-assembly":
            found += assembly_stacks(outdir / artifact["properties"]["directoryName"], prefix)
        elif artifact.get("type") == "aws:cloudformation:stack":
            account, region = artifact["environment"].removeprefix("aws://").split("/")
            template = json.loads((outdir / artifact["properties"]["templateFile"]).read_text())
            found.append(Stack(prefix + (artifact.get("displayName") or artifact["properties"]["templateFile"]), template, account, region))
    return found
