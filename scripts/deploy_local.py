#!/usr/bin/env python3
"""Deploy an environment for real against a local AWS emulator (moto server), check it, destroy it.

`make deploy-local` runs this for config/dev.yaml. No Docker, no AWS account, no credentials:

1. synthesizes the environment with the real CDK CLI (`npx cdk synth -c config=...`);
2. picks the stacks moto can deploy: every resource type is one moto's CloudFormation creates
   (`moto.cloudformation.parsing.get_model_map()`) or one it accepts without materializing
   (`ACCEPTED_NOT_MATERIALIZED`), and every stack it depends on is picked too. The templates
   are deployed as synthesized, never altered;
3. starts `moto_server` on a free localhost port with the config's account (`MOTO_ACCOUNT_ID`),
   forked from this process, which has imported moto's models for step 2 (no second import), with one fix for a moto 5.2.5 bug (tagged KMS keys, see `patch_moto`) and one emulated custom
   resource type, `Custom::VpcRestrictDefaultSG` (`EMULATED_CUSTOM_TYPES`), carried out on moto's
   EC2 state because moto runs custom-resource Lambda functions only with Docker;
4. runs the real `cdk bootstrap` and `cdk deploy` with fake credentials and
   `AWS_ENDPOINT_URL=http://localhost:PORT` (the CLI needs `localhost`, not 127.0.0.1);
5. checks with boto3 what moto materializes: stack resources and outputs, the VPC and its
   subnets, security groups and their ingress rules, VPC endpoints, buckets, KMS keys, and
   cross-stack exports with their imports;
6. runs `cdk destroy`, then stops the server (its whole process group), also on failure.

Exit 0 when every check passed, 1 when one failed, 2 on bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Types moto's CloudFormation accepts but does not create (a warning only): deploying them
# proves nothing about them, and the checks below say so.
ACCEPTED_NOT_MATERIALIZED = frozenset({"AWS::CDK::Metadata", "AWS::EC2::SecurityGroupEgress", "AWS::S3::BucketPolicy"})
# moto creates Lambda functions but runs them (custom resources) only with Docker.
NEEDS_DOCKER_PREFIXES = ("Custom::", "AWS::CloudFormation::CustomResource")
# Custom resources the emulator carries out itself (`patch_moto`): the VPC's default security
# group restriction (two EC2 revoke calls through CDK's AwsCustomResource) is done on moto's EC2
# state directly, without running the Lambda function.
EMULATED_CUSTOM_TYPES = frozenset({"Custom::VpcRestrictDefaultSG"})


def moto_supported_types() -> frozenset[str]:
    """Resource types moto's CloudFormation creates."""
    from moto.cloudformation.parsing import get_model_map

    return frozenset(get_model_map())


@dataclass
class Stack:
    """One stack of the environment's assembly."""

    artifact_id: str
    stack_name: str
    display_name: str
    template: dict[str, Any]
    depends_on: list[str] = field(default_factory=list)  # artifact ids of other stacks

    @property
    def resource_types(self) -> set[str]:
        return {r.get("Type", "") for r in (self.template.get("Resources") or {}).values()}


def read_stacks(outdir: Path, environment: str) -> list[Stack]:
    """The environment's stacks from a cloud assembly, in manifest (deploy) order."""
    manifest = json.loads((outdir / "manifest.json").read_text())
    for artifact_id, artifact in (manifest.get("artifacts") or {}).items():
        if artifact.get("type") == "cdk:cloud-assembly" and artifact["properties"].get("displayName", artifact_id) == environment:
            stage_dir = outdir / artifact["properties"]["directoryName"]
            break
    else:
        raise SystemExit(f"{outdir}: (assembly): no environment {environment!r}")
    stage = json.loads((stage_dir / "manifest.json").read_text())
    stacks = []
    artifacts = stage.get("artifacts") or {}
    for artifact_id, artifact in artifacts.items():
        if artifact.get("type") != "aws:cloudformation:stack":
            continue
        props = artifact["properties"]
        stacks.append(
            Stack(
                artifact_id=artifact_id,
                stack_name=props.get("stackName", artifact_id),
                display_name=artifact.get("displayName", artifact_id),
                template=json.loads((stage_dir / props["templateFile"]).read_text()),
                depends_on=[
                    d for d in artifact.get("dependencies") or [] if artifacts.get(d, {}).get("type") == "aws:cloudformation:stack"
                ],
            )
        )
    return stacks


def select_stacks(stacks: Sequence[Stack], supported: frozenset[str]) -> tuple[list[Stack], dict[str, str]]:
    """(stacks moto can deploy, {stack name: why not} for the others)."""
    skipped: dict[str, str] = {}
    by_id = {s.artifact_id: s for s in stacks}
    for stack in stacks:
        unsupported = sorted(
            t
            for t in stack.resource_types
            if t not in EMULATED_CUSTOM_TYPES
            and ((t not in supported and t not in ACCEPTED_NOT_MATERIALIZED) or t.startswith(NEEDS_DOCKER_PREFIXES))
        )
        if unsupported:
            skipped[stack.stack_name] = f"moto does not deploy {', '.join(unsupported)}"
    changed = True
    while changed:  # a stack whose dependency is skipped cannot be deployed either
        changed = False
        for stack in stacks:
            if stack.stack_name in skipped:
                continue
            missing = [by_id[d].stack_name for d in stack.depends_on if d in by_id and by_id[d].stack_name in skipped]
            if missing:
                skipped[stack.stack_name] = f"depends on {', '.join(missing)}, which is not deployed"
                changed = True
    return [s for s in stacks if s.stack_name not in skipped], skipped


# --------------------------------------------------------------------------------------------
# processes


class Interrupted(Exception):
    """SIGTERM/SIGINT: unwind through the finally blocks that stop the server."""


def _on_signal(signum: int, _frame: Any) -> None:
    raise Interrupted(f"signal {signum}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("localhost", 0))
        return int(sock.getsockname()[1])


def stop_group(proc: subprocess.Popen[Any] | Forked, grace_seconds: float = 10.0) -> None:
    """Stop a process started with start_new_session=True and everything it started."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_seconds)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers of the group, even when the leader exited
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_seconds)


def run(cmd: Sequence[str], *, env: dict[str, str], timeout: float, log: Path) -> int:
    """Run a command in its own process group, output appended to log; killed on timeout."""
    with log.open("a") as out:
        out.write(f"\n$ {shlex.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(list(cmd), cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            out.write(f"\n(timed out after {timeout:.0f} s)\n")
            return 124
        finally:
            stop_group(proc)


def patch_moto() -> None:
    """Two moto 5.2.5 bugs in its CloudFormation AWS::KMS::Key, fixed in the emulator (the
    templates stay as synthesized): it passes the template's `Tags` ([{Key, Value}]) to KMS
    CreateKey, which wants [{TagKey, TagValue}], so every tagged key (all of fminfra's: the stage
    tags them) fails with KeyError 'TagKey'; and it stores `KeyPolicy` as a mapping where KMS
    keeps a JSON string, so DescribeKey then fails with a 500."""
    from moto.kms.models import Key

    original = Key.create_from_cloudformation_json.__func__  # type: ignore[attr-defined]

    def create_from_cloudformation_json(cls: Any, resource_name: str, cloudformation_json: Any, *args: Any, **kwargs: Any) -> Any:
        properties = dict(cloudformation_json.get("Properties") or {})
        tags = properties.get("Tags") or []
        if tags and "Key" in tags[0]:
            properties["Tags"] = [{"TagKey": t["Key"], "TagValue": t["Value"]} for t in tags]
        if isinstance(properties.get("KeyPolicy"), dict):
            properties["KeyPolicy"] = json.dumps(properties["KeyPolicy"])
        return original(cls, resource_name, {**cloudformation_json, "Properties": properties}, *args, **kwargs)

    Key.create_from_cloudformation_json = classmethod(create_from_cloudformation_json)  # type: ignore[method-assign,assignment]
    _emulate_restrict_default_sg()


def _emulate_restrict_default_sg() -> None:
    """`Custom::VpcRestrictDefaultSG` (fminfra/constructs/vpc.py): moto would invoke the
    AwsCustomResource Lambda, which needs Docker; instead the emulator does what the SDK call
    does, on moto's EC2 state: `revokeSecurityGroupIngress` empties the group's inbound rules,
    `revokeSecurityGroupEgress` its outbound ones (the call's `Create` property says which)."""
    from moto.cloudformation import parsing
    from moto.ec2.models import ec2_backends

    class RestrictDefaultSecurityGroup:  # duck-typed like moto's models (its base class needs a moto module)
        def __init__(self, physical_id: str) -> None:
            self.physical_id = physical_id

        @property
        def physical_resource_id(self) -> str:
            return self.physical_id

        @staticmethod
        def cloudformation_type() -> str:
            return "Custom::VpcRestrictDefaultSG"

        @staticmethod
        def has_cfn_attr(attr: str) -> bool:
            return False

        def is_created(self) -> bool:
            return True

        @classmethod
        def delete_from_cloudformation_json(cls, *args: Any, **kwargs: Any) -> None:
            return None

        @classmethod
        def create_from_cloudformation_json(
            cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
        ) -> RestrictDefaultSecurityGroup:
            call = json.loads(cloudformation_json["Properties"]["Create"])
            group = ec2_backends[account_id][region_name].get_security_group_from_id(call["parameters"]["GroupId"])
            if call["action"] == "revokeSecurityGroupIngress":
                group.ingress_rules.clear()
            elif call["action"] == "revokeSecurityGroupEgress":
                group.egress_rules.clear()
            else:
                raise ValueError(f"{resource_name}: unexpected call {call['action']}")
            return cls(call["physicalResourceId"]["id"])

    original = parsing.resource_class_from_type

    def resource_class_from_type(resource_type: str) -> Any:
        return RestrictDefaultSecurityGroup if resource_type in EMULATED_CUSTOM_TYPES else original(resource_type)

    parsing.resource_class_from_type = resource_class_from_type


class Forked:
    """A child of this process, forked (`fork_moto_server`), with the part of `subprocess.Popen` that
    `stop_group` and `moto_server` use: pid, returncode, poll(), wait(timeout)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
            time.sleep(0.05)
        assert self.returncode is not None
        return self.returncode


def fork_moto_server(account: str, port: int, log: Path) -> Forked:
    """moto_server's main with `patch_moto` applied, in a child forked from this process: it has
    imported moto's models already (`moto_supported_types`), so the server starts without importing
    them again (about 2 s). The child leads a process group of its own (as `start_new_session=True`
    gives), writes to the log, takes the default signal handlers back, and never returns here."""
    from moto.server import main as moto_main

    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return Forked(pid)
    code = 1
    try:
        os.setsid()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.environ["MOTO_ACCOUNT_ID"] = account  # read per request: docs/facts/pipeline.md#moto-server-account-and-sigterm
        patch_moto()
        moto_main(["-H", "localhost", "-p", str(port)])
        code = 0
    except SystemExit as exc:  # moto's SIGTERM handler: sys.exit(0) (docs/facts/pipeline.md#moto-server-account-and-sigterm)
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


@contextlib.contextmanager
def moto_server(account: str, port: int, log: Path) -> Iterator[Forked]:
    """moto_server on localhost:PORT for one account; stopped (its process group) on exit."""
    proc = fork_moto_server(account, port, log)
    try:
        print(f"moto_server pid {proc.pid} on http://localhost:{port}", flush=True)
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"moto_server exited with {proc.returncode}; see {log}")
            try:
                with urllib.request.urlopen(f"http://localhost:{port}/moto-api/", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("moto_server did not answer within 60 s") from None
                time.sleep(0.3)
        yield proc
    finally:
        stop_group(proc)
        print(f"moto_server stopped (exit {proc.returncode})", flush=True)


def aws_env(region: str, endpoint: str, home: Path) -> dict[str, str]:
    """Fake credentials and the local endpoint; nothing from the user's AWS configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_"))}
    env.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": region,
            "AWS_REGION": region,
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_CONFIG_FILE": str(home / "aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(home / "aws-credentials"),
            "AWS_EC2_METADATA_DISABLED": "true",
            "CDK_DISABLE_CLI_TELEMETRY": "true",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{ROOT / 'node_modules' / '.bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        }
    )
    return env


# --------------------------------------------------------------------------------------------
# checks


class Checks:
    """Collects `ok` / `FAIL` lines."""

    def __init__(self) -> None:
        self.failed = 0

    def check(self, ok: bool, what: str) -> bool:
        print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
        self.failed += 0 if ok else 1
        return ok

    def note(self, what: str) -> None:
        print(f"--   {what}", flush=True)


def _physical_ids(cfn: Any, stack_name: str) -> dict[str, dict[str, Any]]:
    resources: dict[str, dict[str, Any]] = {}
    for page in cfn.get_paginator("list_stack_resources").paginate(StackName=stack_name):
        for summary in page["StackResourceSummaries"]:
            resources[summary["LogicalResourceId"]] = summary
    return resources


def _resolve_id(value: Any, physical: dict[str, dict[str, Any]]) -> str | None:
    """A Ref / Fn::GetAtt [X, GroupId|Id] to a resource of the same stack -> its physical id."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        if "Ref" in value and value["Ref"] in physical:
            return str(physical[value["Ref"]]["PhysicalResourceId"])
        if "Fn::GetAtt" in value and value["Fn::GetAtt"][0] in physical:
            return str(physical[value["Fn::GetAtt"][0]]["PhysicalResourceId"])
    return None


def _rule_present(permissions: list[dict[str, Any]], rule: dict[str, Any], source_group: str | None) -> bool:
    protocol = str(rule.get("IpProtocol"))
    for perm in permissions:
        if str(perm.get("IpProtocol")) != protocol:
            continue
        if protocol not in ("-1", "all") and (perm.get("FromPort"), perm.get("ToPort")) != (rule.get("FromPort"), rule.get("ToPort")):
            continue
        if source_group and any(p.get("GroupId") == source_group for p in perm.get("UserIdGroupPairs") or []):
            return True
        if rule.get("CidrIp") and any(r.get("CidrIp") == rule["CidrIp"] for r in perm.get("IpRanges") or []):
            return True
    return False


def check_stack(checks: Checks, session: Any, endpoint: str, stack: Stack, supported: frozenset[str]) -> list[str]:
    """Check one deployed stack; the ids of its VPCs (to check their deletion later)."""
    cfn = session.client("cloudformation", endpoint_url=endpoint)
    ec2 = session.client("ec2", endpoint_url=endpoint)
    described = cfn.describe_stacks(StackName=stack.stack_name)["Stacks"][0]
    checks.check(described["StackStatus"] == "CREATE_COMPLETE", f"{stack.stack_name}: {described['StackStatus']}")
    physical = _physical_ids(cfn, stack.stack_name)
    resources = stack.template.get("Resources") or {}
    materialized = {lid: r for lid, r in resources.items() if r["Type"] in supported}
    missing = sorted(set(materialized) - set(physical))
    checks.check(
        not missing,
        f"{stack.stack_name}: all {len(materialized)} resources moto creates are in the stack"
        + (f", missing {missing}" if missing else ""),
    )
    not_materialized = sorted({r["Type"] for r in resources.values() if r["Type"] in ACCEPTED_NOT_MATERIALIZED})
    if not_materialized:
        checks.note(f"{stack.stack_name}: accepted by moto without materializing, not checked: {', '.join(not_materialized)}")

    outputs = {o["OutputKey"]: o for o in described.get("Outputs") or []}
    expected_outputs = set((stack.template.get("Outputs") or {}).keys())
    checks.check(
        expected_outputs <= set(outputs),
        f"{stack.stack_name}: outputs {sorted(expected_outputs)}"
        + ("" if expected_outputs <= set(outputs) else f", got {described.get('Outputs')}"),
    )

    by_type: dict[str, dict[str, dict[str, Any]]] = {}
    for lid, res in resources.items():
        by_type.setdefault(res["Type"], {})[lid] = res

    for lid, res in by_type.get("AWS::EC2::VPC", {}).items():
        vpc_id = physical[lid]["PhysicalResourceId"]
        vpc = ec2.describe_vpcs(VpcIds=[vpc_id])["Vpcs"][0]
        checks.check(vpc["CidrBlock"] == res["Properties"]["CidrBlock"], f"VPC {vpc_id}: CIDR {vpc['CidrBlock']}")
        subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])["Subnets"]
        want = sorted(r["Properties"]["CidrBlock"] for r in by_type.get("AWS::EC2::Subnet", {}).values())
        got = sorted(s["CidrBlock"] for s in subnets)
        checks.check(got == want, f"VPC {vpc_id}: {len(got)} subnets with the planned CIDRs {want}")
        endpoints = ec2.describe_vpc_endpoints(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])["VpcEndpoints"]
        want_types = sorted(r["Properties"].get("VpcEndpointType", "Gateway") for r in by_type.get("AWS::EC2::VPCEndpoint", {}).values())
        got_types = sorted(e["VpcEndpointType"] for e in endpoints)
        checks.check(
            got_types == want_types,
            f"VPC {vpc_id}: {len(endpoints)} endpoints ({got_types.count('Gateway')} gateway, {got_types.count('Interface')} interface)",
        )
    for lid in by_type.get("AWS::EC2::Subnet", {}):
        checks.check(lid in physical, f"subnet {lid} created")

    groups = by_type.get("AWS::EC2::SecurityGroup", {})
    for lid, res in groups.items():
        group_id = physical[lid]["PhysicalResourceId"]
        group = ec2.describe_security_groups(GroupIds=[group_id])["SecurityGroups"][0]
        rules = [
            (rule, _resolve_id(rule.get("SourceSecurityGroupId"), physical)) for rule in res["Properties"].get("SecurityGroupIngress") or []
        ]
        for ingress in by_type.get("AWS::EC2::SecurityGroupIngress", {}).values():
            props = ingress["Properties"]
            if _resolve_id(props.get("GroupId"), physical) == group_id:
                rules.append((props, _resolve_id(props.get("SourceSecurityGroupId"), physical)))
        present = [_rule_present(group.get("IpPermissions") or [], rule, source) for rule, source in rules]
        checks.check(all(present), f"security group {group_id} ({lid}): {sum(present)}/{len(rules)} ingress rules present")
    for lid in by_type.get("AWS::S3::Bucket", {}):
        name = physical[lid]["PhysicalResourceId"]
        session.client("s3", endpoint_url=endpoint).head_bucket(Bucket=name)
        checks.check(True, f"bucket {name} ({lid}) exists")
    for lid in by_type.get("AWS::KMS::Key", {}):
        key = session.client("kms", endpoint_url=endpoint).describe_key(KeyId=physical[lid]["PhysicalResourceId"])["KeyMetadata"]
        checks.check(key["KeyState"] == "Enabled", f"KMS key {key['KeyId']} ({lid}): {key['KeyState']}")
    return [physical[lid]["PhysicalResourceId"] for lid in by_type.get("AWS::EC2::VPC", {})]


def _import_names(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "Fn::ImportValue" and isinstance(inner, str):
                yield inner
            else:
                yield from _import_names(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _import_names(inner)


def check_exports(checks: Checks, session: Any, endpoint: str, stacks: Sequence[Stack]) -> None:
    cfn = session.client("cloudformation", endpoint_url=endpoint)
    exports = {e["Name"]: e for e in cfn.list_exports().get("Exports") or []}
    for stack in stacks:
        for key, output in (stack.template.get("Outputs") or {}).items():
            name = (output.get("Export") or {}).get("Name")
            if name:
                checks.check(name in exports, f"{stack.stack_name}: export {name} ({key})")
        imports = sorted(set(_import_names(stack.template.get("Resources"))))
        if not imports:
            continue
        # moto has no ListImports; an importer that is CREATE_COMPLETE resolved its imports (a
        # missing export fails the stack, in CloudFormation and in moto alike)
        try:
            status = cfn.describe_stacks(StackName=stack.stack_name)["Stacks"][0]["StackStatus"]
        except Exception:
            status = "not deployed"
        for name in imports:
            checks.check(name in exports and status == "CREATE_COMPLETE", f"{stack.stack_name}: imports {name} ({status})")


# What moto's CloudFormation does not delete with the stack (its models lack a delete): the
# VPC then cannot be deleted either ("has dependencies"). Anything else left over is a failure.
MOTO_UNDELETED = ("flow logs", "VPC endpoints", "NAT gateways", "internet gateways", "route tables", "network interfaces")


def vpc_inventory(ec2: Any, vpc_id: str) -> dict[str, int] | None:
    """What is still in a VPC, by kind; None when the VPC is gone."""
    from botocore.exceptions import ClientError

    try:
        ec2.describe_vpcs(VpcIds=[vpc_id])
    except ClientError as exc:
        if "NotFound" in str(exc):
            return None
        raise
    in_vpc = [{"Name": "vpc-id", "Values": [vpc_id]}]
    return {
        "subnets": len(ec2.describe_subnets(Filters=in_vpc)["Subnets"]),
        "security groups": len([g for g in ec2.describe_security_groups(Filters=in_vpc)["SecurityGroups"] if g["GroupName"] != "default"]),
        "flow logs": len([f for f in ec2.describe_flow_logs()["FlowLogs"] if f.get("ResourceId") == vpc_id]),
        "VPC endpoints": len(ec2.describe_vpc_endpoints(Filters=in_vpc)["VpcEndpoints"]),
        "NAT gateways": len([n for n in ec2.describe_nat_gateways(Filters=in_vpc)["NatGateways"] if n["State"] != "deleted"]),
        "internet gateways": len(
            ec2.describe_internet_gateways(Filters=[{"Name": "attachment.vpc-id", "Values": [vpc_id]}])["InternetGateways"]
        ),
        "route tables": len(
            [t for t in ec2.describe_route_tables(Filters=in_vpc)["RouteTables"] if not any(a.get("Main") for a in t["Associations"])]
        ),
        "network interfaces": len(ec2.describe_network_interfaces(Filters=in_vpc)["NetworkInterfaces"]),
    }


def check_destroyed(
    checks: Checks, session: Any, endpoint: str, vpc_ids: Sequence[str], destroy_exit: int, failed_logs: Sequence[str]
) -> None:
    """Every VPC gone; or, where moto's known gap blocks it, nothing but what moto cannot delete left.

    `failed_logs`: the output of each failed `cdk destroy`; the gap excuses only failures that all
    say the VPC has dependencies.
    """
    ec2 = session.client("ec2", endpoint_url=endpoint)
    moto_gap = destroy_exit != 0 and all("has dependencies and cannot be deleted" in o for o in failed_logs)
    checks.check(
        destroy_exit == 0 or moto_gap, f"cdk destroy (exit {destroy_exit})" + (": the VPC's dependencies, see below" if moto_gap else "")
    )
    for vpc_id in vpc_ids:
        left = vpc_inventory(ec2, vpc_id)
        if left is None:
            checks.check(True, f"VPC {vpc_id} deleted")
            continue
        unexpected = {k: n for k, n in left.items() if n and k not in MOTO_UNDELETED}
        known = ", ".join(f"{n} {k}" for k, n in left.items() if n and k in MOTO_UNDELETED)
        checks.check(
            moto_gap and not unexpected,
            f"VPC {vpc_id}: subnets and security groups deleted; left only what moto's CloudFormation cannot delete ({known})"
            + (f"; unexpected: {unexpected}" if unexpected else ""),
        )


# --------------------------------------------------------------------------------------------


def deploy_local(config: Path, *, cdk: Sequence[str], timeout_per_step: float, workdir: Path) -> int:
    from fminfra.config import load_config
    from fminfra.core.errors import ConfigError

    try:
        cfg = load_config(config)
    except ConfigError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 2
    log = workdir / "deploy-local.log"
    outdir = workdir / "cdk.out"
    checks = Checks()
    home = workdir / "home"
    home.mkdir(exist_ok=True)
    port = free_port()
    endpoint = f"http://localhost:{port}"
    env = aws_env(cfg.region, endpoint, home)
    print(f"log: {log}", flush=True)
    code = run(
        [*cdk, "synth", "--quiet", "--no-notices", "-c", f"config={config}", "-o", str(outdir)], env=env, timeout=timeout_per_step, log=log
    )
    if not checks.check(code == 0, f"cdk synth -c config={config} (exit {code})"):
        return 1
    supported = moto_supported_types()
    stacks, skipped = select_stacks(read_stacks(outdir, cfg.name), supported)
    for name, why in skipped.items():
        checks.note(f"{name}: not deployed: {why}")
    if not checks.check(bool(stacks), f"stacks to deploy: {', '.join(s.stack_name for s in stacks) or 'none'}"):
        return 1
    import boto3

    session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=cfg.region)  # noqa: S106
    selectors = [s.display_name for s in stacks]
    with moto_server(cfg.account, port, log):
        code = run(
            [*cdk, "bootstrap", f"aws://{cfg.account}/{cfg.region}", "--app", str(outdir), "--no-notices"],
            env=env,
            timeout=timeout_per_step,
            log=log,
        )
        if not checks.check(code == 0, f"cdk bootstrap aws://{cfg.account}/{cfg.region} (exit {code})"):
            return 1
        # --method direct (CreateStack rather than a change set): moto reports stack outputs only then.
        deploy = [
            *cdk,
            "deploy",
            "--app",
            str(outdir),
            "--require-approval",
            "never",
            "--no-notices",
            "--exclusively",
            "--method",
            "direct",
        ]
        code = run([*deploy, *selectors], env=env, timeout=timeout_per_step, log=log)
        if not checks.check(code == 0, f"cdk deploy {' '.join(selectors)} (exit {code})"):
            return 1
        vpc_ids: list[str] = []
        for stack in stacks:
            try:
                vpc_ids += check_stack(checks, session, endpoint, stack, supported)
            except Exception as exc:  # a failed AWS call is a failed check, not a crash before destroy
                checks.check(False, f"{stack.stack_name}: {type(exc).__name__}: {exc}")
        try:
            check_exports(checks, session, endpoint, stacks)
        except Exception as exc:
            checks.check(False, f"exports: {type(exc).__name__}: {exc}")
        # One stack at a time, dependents first: with --exclusively the CLI would not order them.
        destroy = [*cdk, "destroy", "--app", str(outdir), "--force", "--no-notices", "--exclusively"]
        codes, outputs = [], []
        for stack in reversed(stacks):
            codes.append(run([*destroy, stack.display_name], env=env, timeout=timeout_per_step, log=log))
            outputs.append(log.read_text().rsplit("\n$ ", 1)[-1])
        failed = [(c, o) for c, o in zip(codes, outputs, strict=True) if c != 0]
        check_destroyed(checks, session, endpoint, vpc_ids, max(codes), [o for _, o in failed])
        cfn = session.client("cloudformation", endpoint_url=endpoint)
        alive = {
            s["StackName"] for s in cfn.list_stacks()["StackSummaries"] if s["StackStatus"] not in ("DELETE_COMPLETE", "DELETE_FAILED")
        }
        left = sorted(alive & {s.stack_name for s in stacks})
        checks.check(not left, "no deployed stack left active" + (f", left: {left}" if left else ""))
    print(
        f"deploy-local: {'FAIL' if checks.failed else 'ok'}: {checks.failed} failed check(s) (log: {log}; kept with --workdir)", flush=True
    )
    return 1 if checks.failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--config", default="config/dev.yaml", help="environment config (default config/dev.yaml)")
    parser.add_argument("--cdk", default="npx --no-install cdk", help="CDK CLI command (default: the pinned one, npx --no-install cdk)")
    parser.add_argument("--timeout-per-step", type=float, default=300, help="seconds per CDK command (default 300)")
    parser.add_argument("--workdir", help="keep cdk.out and the log here (default: a temporary folder, removed)")
    ns = parser.parse_args(args)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        if ns.workdir:
            workdir = Path(ns.workdir)
            workdir.mkdir(parents=True, exist_ok=True)
            return deploy_local(Path(ns.config), cdk=shlex.split(ns.cdk), timeout_per_step=ns.timeout_per_step, workdir=workdir)
        with tempfile.TemporaryDirectory(prefix="fminfra-deploy-local-") as tmp:
            code = deploy_local(Path(ns.config), cdk=shlex.split(ns.cdk), timeout_per_step=ns.timeout_per_step, workdir=Path(tmp))
            if code == 1:
                print((Path(tmp) / "deploy-local.log").read_text()[-4000:], file=sys.stderr)
            return code
    except Interrupted as exc:
        print(f"deploy-local: interrupted ({exc}); server stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
