"""README.md's EKS section names every Kubernetes component the synthesized templates install.

The components are read from the templates of every EKS-based config (shipped, examples and test
configs): EKS add-ons (name, version), Helm charts (chart, version), the HyperPod dependency chart
release (commit), the manifests' objects (names), the kubectl/helm layer (its bundled versions) and
the system node group (instance type). Each must have a row in the README table that names it in
backquotes and shows its version, so a component added to the code without a README row (or a
version bump without the README) fails here.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from fminfra.serving.rules import MODEL_LABEL
from tests.conftest import ROOT, Synth

SECTION = "## EKS: what gets installed"
# The layer's description, as aws-cdk.lambda-layer-kubectl-vNN writes it.
KUBECTL_LAYER = re.compile(r"/opt/kubectl/kubectl (\S+); /opt/helm/helm (\S+)")
SYSTEM_NODES_LABEL = ("fminfra/role", "system")
SYSTEM_NODE_GROUP = "<cluster>-system"


# What a CloudFormation value inside a manifest (an Fn::ImportValue, a Ref) reads as: a plain string
# with no quote or backslash, so the manifest's literal parts still parse as its JSON.
TOKEN = "${token}"


def manifest_text(manifest: Any) -> str:
    """A KubernetesResource's manifest as JSON text. With tokens CDK writes it as an Fn::Join of the
    JSON's literal parts and the values (each inside a JSON string, such as the FSx volume's
    `volumeHandle` from an Fn::ImportValue): each value reads as TOKEN."""
    if isinstance(manifest, str):
        return manifest
    join = manifest.get("Fn::Join") if isinstance(manifest, dict) and len(manifest) == 1 else None
    assert isinstance(join, list) and len(join) == 2, f"a manifest neither JSON text nor an Fn::Join: {manifest!r:.200}"
    separator, parts = join
    assert isinstance(separator, str) and isinstance(parts, list), f"a manifest's Fn::Join is not [separator, parts]: {manifest!r:.200}"
    return separator.join(part if isinstance(part, str) else TOKEN for part in parts)


# install_extensions names each extension's construct Extension-<name> (logical id Extension<name>...).
EXTENSION_ID = "Extension"


def eks_components(template: dict[str, Any]) -> dict[str, str]:
    """Component name -> the version its row must show ("" when it has none)."""
    found: dict[str, str] = {}
    for lid, resource in (template.get("Resources") or {}).items():
        if lid.startswith(EXTENSION_ID):  # a team's own add-on or chart (a config's `compute.eks.addons`), not fminfra's
            continue
        kind, props = resource.get("Type"), resource.get("Properties") or {}
        if kind == "AWS::EKS::Addon":
            found[props["AddonName"]] = props.get("AddonVersion", "")
        elif kind == "Custom::AWSCDK-EKS-HelmChart":
            found[props["Chart"]] = props.get("Version", "")
        elif kind == "Custom::HyperPodDependencies":
            found[props["Release"]] = props["Commit"][:12]
        elif kind == "Custom::AWSCDK-EKS-KubernetesResource":
            for obj in json.loads(manifest_text(props["Manifest"])):
                assert TOKEN not in obj["kind"] + obj["metadata"]["name"], f"an object whose kind or name is a token: {obj!r:.200}"
                # per-team objects (a team's Namespace, its Kueue queues, the FSx volume of its namespace) are named after the
                # config's teams, and a Karpenter NodePool and EC2NodeClass after each inference group: their
                # row names the kind, not each team or group
                # and a served model's objects after the model (fminfra.serving.rules.MODEL_LABEL)
                per_team = (
                    obj["kind"] in ("Namespace", "PersistentVolume")
                    or obj["apiVersion"].startswith(("kueue.x-k8s.io/", "karpenter."))
                    or MODEL_LABEL in (obj["metadata"].get("labels") or {})
                )
                found[obj["kind"] if per_team else obj["metadata"]["name"]] = ""
        elif kind == "AWS::Lambda::LayerVersion":
            bundled = KUBECTL_LAYER.search(props.get("Description", ""))
            if bundled:
                found["kubectl"], found["helm"] = bundled.group(1), bundled.group(2)
        elif kind == "AWS::EKS::Nodegroup" and (props.get("Labels") or {}).get(SYSTEM_NODES_LABEL[0]) == SYSTEM_NODES_LABEL[1]:
            found[SYSTEM_NODE_GROUP] = ", ".join(props.get("InstanceTypes") or [])
    return found


def readme_rows(readme: str) -> list[str]:
    """The table rows of README.md's EKS section (none when the section is missing)."""
    if SECTION not in readme:
        return []
    start = readme.index(SECTION)
    end = readme.find("\n## ", start + len(SECTION))
    section = readme[start : end if end != -1 else len(readme)]
    return [line for line in section.splitlines() if line.startswith("|") and not line.startswith("|---")]


def shows(row: str, version: str) -> bool:
    """Whether the row shows the version as a whole token (v1.13.2-eksbuild.1 is not in v1.13.2-eksbuild.11)."""
    return re.search(rf"(?<![\w.-]){re.escape(version)}(?![\w.-])", row) is not None


def missing_rows(rows: list[str], components: dict[str, tuple[str, str]]) -> list[str]:
    """One line per component (name -> (version, where installed)) with no row naming it and showing its version."""
    problems = []
    for name, (version, where) in sorted(components.items()):
        named = [row for row in rows if f"`{name}`" in row]
        if not named:
            problems.append(f"README.md, {SECTION[3:]}: no row names `{name}` (installed by {where})")
        elif version and not any(shows(row, version) for row in named):
            problems.append(f"README.md, {SECTION[3:]}: the row of `{name}` does not show {version} (installed by {where})")
    return problems


@pytest.fixture(scope="module")
def installed(synth: Synth) -> dict[str, tuple[str, str]]:
    """Every component of every EKS template: name -> (version, first stack that installs it)."""
    components: dict[str, tuple[str, str]] = {}
    for stack in synth.all_templates():
        resources = (stack.template.get("Resources") or {}).values()
        if not any(r.get("Type") == "AWS::EKS::Cluster" for r in resources):
            continue
        for name, version in eks_components(stack.template).items():
            components.setdefault(name, (version, stack.display_name))
    return components


def test_readme_names_every_installed_component(installed: dict[str, tuple[str, str]]) -> None:
    # The shipped HyperPod EKS config and the inference-only test configs are all read.
    assert {"amazon-sagemaker-hyperpod-training-operator", "hyperpod-dependencies", "nvidia-device-plugin", SYSTEM_NODE_GROUP} <= set(
        installed
    )
    rows = readme_rows((ROOT / "README.md").read_text(encoding="utf-8"))
    assert missing_rows(rows, installed) == []


def test_a_component_without_a_row_fails(installed: dict[str, tuple[str, str]]) -> None:
    rows = readme_rows((ROOT / "README.md").read_text(encoding="utf-8"))
    # A row deleted.
    without = [r for r in rows if "`cert-manager`" not in r]
    assert missing_rows(without, installed) == [
        f"README.md, {SECTION[3:]}: no row names `cert-manager` (installed by {installed['cert-manager'][1]})"
    ]
    # An add-on added to the code without a row.
    added = {**installed, "aws-ebs-csi-driver": ("v1.50.0-eksbuild.1", "staging/Compute")}
    assert missing_rows(rows, added) == [f"README.md, {SECTION[3:]}: no row names `aws-ebs-csi-driver` (installed by staging/Compute)"]
    # A version bumped without the README.
    bumped = {**installed, "coredns": ("v1.13.2-eksbuild.4", "staging/Compute")}
    assert missing_rows(rows, bumped) == [
        f"README.md, {SECTION[3:]}: the row of `coredns` does not show v1.13.2-eksbuild.4 (installed by staging/Compute)"
    ]
    # A build whose string is a prefix of the one the README shows (the row says v1.13.2-eksbuild.11).
    prefix = {**installed, "coredns": ("v1.13.2-eksbuild.1", "staging/Compute")}
    assert missing_rows(rows, prefix) == [
        f"README.md, {SECTION[3:]}: the row of `coredns` does not show v1.13.2-eksbuild.1 (installed by staging/Compute)"
    ]


def test_components_are_read_from_each_kind_of_resource() -> None:
    template = {
        "Resources": {
            "A": {"Type": "AWS::EKS::Addon", "Properties": {"AddonName": "kueue-addon", "AddonVersion": "v1"}},
            "C": {"Type": "Custom::AWSCDK-EKS-HelmChart", "Properties": {"Chart": "kueue", "Version": "0.13.4"}},
            "H": {"Type": "Custom::HyperPodDependencies", "Properties": {"Release": "hp", "Commit": "0123456789abcdef" * 2}},
            "M": {
                "Type": "Custom::AWSCDK-EKS-KubernetesResource",
                "Properties": {
                    "Manifest": '[{"apiVersion":"kueue.x-k8s.io/v1beta2","kind":"ClusterQueue","metadata":{"name":"cq"}},'
                    '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-a"}},'
                    '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"reader"}}]'
                },
            },
            # With tokens (the FSx volume's file system id and DNS name): an Fn::Join of literal parts and values.
            "T": {
                "Type": "Custom::AWSCDK-EKS-KubernetesResource",
                "Properties": {
                    "Manifest": {
                        "Fn::Join": [
                            "",
                            [
                                '[{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"vol"},"spec":{"csi":{"volumeHandle":"',
                                {"Fn::ImportValue": "Storage:FileSystemId"},
                                '","volumeAttributes":{"dnsname":"',
                                {"Fn::ImportValue": "Storage:DnsName"},
                                '"}}}},{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"claim"}}]',
                            ],
                        ]
                    }
                },
            },
            "L": {"Type": "AWS::Lambda::LayerVersion", "Properties": {"Description": "/opt/kubectl/kubectl 1.34.5; /opt/helm/helm 4.1.3"}},
            "N": {"Type": "AWS::EKS::Nodegroup", "Properties": {"Labels": {"fminfra/role": "system"}, "InstanceTypes": ["m7g.large"]}},
            "G": {"Type": "AWS::EKS::Nodegroup", "Properties": {"Labels": {"workload": "inference"}, "InstanceTypes": ["g6e.12xlarge"]}},
        }
    }
    assert eks_components(template) == {
        "kueue-addon": "v1",
        "kueue": "0.13.4",
        "hp": "0123456789ab",
        "ClusterQueue": "",
        "Namespace": "",
        "reader": "",
        "PersistentVolume": "",
        "claim": "",
        "kubectl": "1.34.5",
        "helm": "4.1.3",
        SYSTEM_NODE_GROUP: "m7g.large",
    }


def test_a_manifest_whose_name_is_a_token_fails() -> None:
    """Its row could not name it: the test says so instead of reading a placeholder as the name."""
    parts = ['[{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"', {"Ref": "Name"}, '"}}]']
    template = {
        "Resources": {"T": {"Type": "Custom::AWSCDK-EKS-KubernetesResource", "Properties": {"Manifest": {"Fn::Join": ["", parts]}}}}
    }
    with pytest.raises(AssertionError, match="an object whose kind or name is a token"):
        eks_components(template)
