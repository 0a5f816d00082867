"""Every EKS node group of an environment with the FSx claim can reach the file system, read from the
synthesized templates of all its stacks: the node group's security groups (its launch template's, or
the cluster security group EKS gives a group without them), the file system's, and every rule between
them, inline or standalone, in any stack, cross-stack imports resolved to the resource they name.

Lustre clients and the file system talk on TCP 988 and 1018-1023 both ways (docs/facts/storage.md#fsx-lustre-ports);
with EFA the two groups allow all traffic both ways (docs/facts/network.md#efa-security-group-self-traffic).
Serving read, B: the file system admitted only itself and the EFA group, so pods on the system nodes
and on inference groups without EFA could not mount the claim."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from fminfra.app.synth import build_app
from fminfra.config import parse_config, read_yaml
from fminfra.core.assembly import StackTemplate, read_assembly
from tests.conftest import ROOT, Synth

LUSTRE_PORTS = (988, 1018, 1023)
FSX_CSI_ADDON = "aws-fsx-csi-driver"
# A group id: (stack name, logical id) of the resource it comes from, with the attribute read.
Group = tuple[str, str, str]


@dataclass(frozen=True)
class Rule:
    """One direction of a security-group rule: `group` lets traffic in from / out to `peer` on ports."""

    group: Group
    peer: Group | None  # None: a CIDR
    cidr: str | None
    low: int
    high: int

    def covers(self, port: int) -> bool:
        return self.low <= port <= self.high


class Network:
    """The security groups and rules of one environment's templates."""

    def __init__(self, stacks: Iterable[StackTemplate]) -> None:
        self.stacks = {s.stack_name: s.template for s in stacks}
        self.exports: dict[str, tuple[str, Any]] = {}
        for name, template in self.stacks.items():
            for output in (template.get("Outputs") or {}).values():
                export = (output.get("Export") or {}).get("Name")
                if export is not None:
                    self.exports[export] = (name, output["Value"])
        self.ingress: list[Rule] = []
        self.egress: list[Rule] = []
        for name, template in self.stacks.items():
            for lid, resource in (template.get("Resources") or {}).items():
                self._read(name, lid, resource)

    def group(self, stack: str, value: Any) -> Group:
        """The group a value names: a GetAtt/Ref in `stack`, or an import of another stack's output."""
        if isinstance(value, dict) and "Fn::ImportValue" in value:
            producer, produced = self.exports[value["Fn::ImportValue"]]
            return self.group(producer, produced)
        if isinstance(value, dict) and "Fn::GetAtt" in value:
            lid, attribute = value["Fn::GetAtt"]
            return (stack, lid, attribute)
        if isinstance(value, dict) and "Ref" in value:
            return (stack, value["Ref"], "GroupId")
        raise AssertionError(f"{stack}: a security group named by {value!r}, which this test cannot read")

    def resource(self, stack: str, lid: str) -> dict[str, Any]:
        return dict(self.stacks[stack]["Resources"][lid])

    def _rule(self, stack: str, group: Group, props: dict[str, Any], peer_key: str, cidr_key: str) -> Rule:
        protocol = str(props.get("IpProtocol"))
        low, high = (0, 65535) if protocol == "-1" else (int(props.get("FromPort", 0)), int(props.get("ToPort", 65535)))
        if protocol not in ("-1", "tcp", "6"):
            low, high = (1, 0)  # no TCP port
        peer = self.group(stack, props[peer_key]) if peer_key in props else None
        return Rule(group, peer, props.get(cidr_key), low, high)

    def _read(self, stack: str, lid: str, resource: dict[str, Any]) -> None:
        kind, props = resource.get("Type"), resource.get("Properties") or {}
        if kind == "AWS::EC2::SecurityGroup":
            group = (stack, lid, "GroupId")
            for rule in props.get("SecurityGroupIngress") or []:
                self.ingress.append(self._rule(stack, group, rule, "SourceSecurityGroupId", "CidrIp"))
            egress = props.get("SecurityGroupEgress")
            if egress is None:  # CloudFormation's default: all outbound traffic
                self.egress.append(Rule(group, None, "0.0.0.0/0", 0, 65535))
            for rule in egress or []:
                self.egress.append(self._rule(stack, group, rule, "DestinationSecurityGroupId", "CidrIp"))
        elif kind == "AWS::EC2::SecurityGroupIngress":
            group = self.group(stack, props["GroupId"])
            self.ingress.append(self._rule(stack, group, props, "SourceSecurityGroupId", "CidrIp"))
        elif kind == "AWS::EC2::SecurityGroupEgress":
            group = self.group(stack, props["GroupId"])
            self.egress.append(self._rule(stack, group, props, "DestinationSecurityGroupId", "CidrIp"))
        elif kind == "AWS::EKS::Cluster":
            # The cluster security group EKS creates allows all outbound traffic and all traffic from itself
            # (docs/facts/eks.md#eks-cluster-security-group-default-rules).
            group = (stack, lid, "ClusterSecurityGroupId")
            self.egress.append(Rule(group, None, "0.0.0.0/0", 0, 65535))
            self.ingress.append(Rule(group, group, None, 0, 65535))

    def admits(self, group: Group, peer: Group, port: int) -> bool:
        return any(r.group == group and r.peer == peer and r.covers(port) for r in self.ingress)

    def sends(self, group: Group, peer: Group, port: int) -> bool:
        return any(r.group == group and (r.peer == peer or r.cidr == "0.0.0.0/0") and r.covers(port) for r in self.egress)

    def reach(self, client: Group, server: Group, port: int) -> bool:
        """A connection from `client` to `server` on `port` and the server's connections back to it."""
        there = self.sends(client, server, port) and self.admits(server, client, port)
        back = self.sends(server, client, port) and self.admits(client, server, port)
        return there and back


def node_group_security_groups(net: Network, stack: str, lid: str, cluster_group: Group) -> list[Group]:
    """A managed node group's groups: its launch template's, or the cluster security group."""
    props = net.resource(stack, lid)["Properties"]
    template = props.get("LaunchTemplate")
    if template is None:
        return [cluster_group]
    lt_id = template.get("Id") or template.get("Name")
    lt_stack, lt_lid, _ = net.group(stack, lt_id)
    data = net.resource(lt_stack, lt_lid)["Properties"]["LaunchTemplateData"]
    groups = [net.group(lt_stack, g) for g in data.get("SecurityGroupIds") or []]
    for interface in data.get("NetworkInterfaces") or []:
        groups.extend(net.group(lt_stack, g) for g in interface.get("Groups") or [])
    return groups or [cluster_group]


def unreachable_node_groups(stacks: list[StackTemplate]) -> Iterator[str]:
    """'<node group>: <why>' for each EKS node group of an environment with the FSx claim that cannot mount it."""
    net = Network(stacks)
    compute = next((s for s in stacks if any(r.get("Type") == "AWS::EKS::Cluster" for r in s.template["Resources"].values())), None)
    if compute is None:
        return
    resources = compute.template["Resources"]
    if not any(r["Type"] == "AWS::EKS::Addon" and r["Properties"]["AddonName"] == FSX_CSI_ADDON for r in resources.values()):
        return
    cluster_lid = next(lid for lid, r in resources.items() if r["Type"] == "AWS::EKS::Cluster")
    cluster_group: Group = (compute.stack_name, cluster_lid, "ClusterSecurityGroupId")
    file_systems = [(s.stack_name, r) for s in stacks for r in s.template["Resources"].values() if r["Type"] == "AWS::FSx::FileSystem"]
    assert len(file_systems) == 1, f"{compute.environment}: one file system expected, found {len(file_systems)}"
    fs_stack, fs = file_systems[0]
    fs_groups = [net.group(fs_stack, g) for g in fs["Properties"]["SecurityGroupIds"]]
    for lid, resource in resources.items():
        if resource["Type"] != "AWS::EKS::Nodegroup":
            continue
        groups = node_group_security_groups(net, compute.stack_name, lid, cluster_group)
        for port in LUSTRE_PORTS:
            if not any(net.reach(g, f, port) for g in groups for f in fs_groups):
                yield f"{compute.environment}/{lid}: groups {groups} cannot reach the file system's {fs_groups} on TCP {port}"


def test_every_node_group_reaches_the_file_system(synth: Synth) -> None:
    checked = [env for env, stacks in synth.stacks.items() if any("FsxVolume" in lid for s in stacks for lid in s.template["Resources"])]
    assert "staging" in checked, f"the shipped staging environment has the FSx claim; checked only {checked}"
    problems = [p for stacks in synth.stacks.values() for p in unreachable_node_groups(stacks)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("efa", [False, True], ids=["tcp", "efa"])
def test_the_check_fails_without_the_cluster_group_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, efa: bool) -> None:
    """The test of the test: staging (a g6e group without EFA, and system-less HyperPod nodes) with the
    rules for the cluster security group left out, for a file system with and without EFA."""
    from fminfra.compute.constructs import clusters

    data = read_yaml(ROOT / "config" / "staging.yaml")
    if efa:  # EFA at 500 MB/s/TiB is created in steps of 9600 GiB (docs/facts/storage.md#fsx-lustre-efa-capacity-steps)
        data["storage"]["lustre"].update(efa=True, storage_capacity_gib=9600)
    cfg = parse_config(data, "staging.yaml")
    assert cfg.storage is not None and cfg.storage.lustre is not None and cfg.storage.lustre.efa is efa
    monkeypatch.setattr(clusters, "admit_lustre_clients", lambda *a, **k: None)
    app = cdk.App(outdir=str(tmp_path))
    build_app([cfg], app=app)
    app.synth()
    problems = list(unreachable_node_groups(read_assembly(tmp_path)[cfg.name]))
    assert any("Inference" in p or "Serve" in p or "serve" in p for p in problems), problems
