"""The FSx static volume (fminfra/eks/constructs/fsx_volume.py) against the driver's own static
provisioning example at the pinned release (tests/data/fsx_csi/), and no hostPath of /fsx anywhere."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import yaml
from aws_cdk.assertions import Template

from fminfra import FEATURE_FLAGS, EnvironmentStage
from fminfra.config import load_config, parse_config, read_yaml
from fminfra.eks.constructs.fsx_volume import fsx_volume_objects
from fminfra.eks.rules import FSX_CLAIM_NAME
from fminfra.ops.accept.manifests import eks_plan
from fminfra.storage.rules import FSX_MOUNT
from tests.conftest import ROOT, Synth

DATA = ROOT / "tests" / "data" / "fsx_csi"


def _shape(value: Any) -> Any:
    """Keys, nested, without values: what the example and fminfra must share."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    return type(value).__name__


def test_the_volume_and_claim_have_the_drivers_static_shape() -> None:
    pv, claim = fsx_volume_objects(file_system_id="fs-1", dns_name="fs-1.fsx", mount_name="abc", namespaces=["team"])
    example_pv = yaml.safe_load((DATA / "static-pv-v1.7.0.yaml").read_text(encoding="utf-8"))
    example_claim = yaml.safe_load((DATA / "static-claim-v1.7.0.yaml").read_text(encoding="utf-8"))
    assert pv["spec"]["csi"] == {
        "driver": example_pv["spec"]["csi"]["driver"],
        "volumeHandle": "fs-1",
        "volumeAttributes": {"dnsname": "fs-1.fsx", "mountname": "abc"},
    }
    assert set(example_pv["spec"]) <= set(pv["spec"])
    assert (
        pv["spec"]["accessModes"] == example_pv["spec"]["accessModes"] and pv["spec"]["mountOptions"] == example_pv["spec"]["mountOptions"]
    )
    assert set(example_claim["spec"]) <= set(claim["spec"]) and claim["spec"]["storageClassName"] == ""
    assert claim["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pv["spec"]["claimRef"] == {"namespace": "team", "name": FSX_CLAIM_NAME}


def test_staging_gets_the_volume_in_the_teams_namespace(synth: Synth) -> None:
    [manifest] = [
        r
        for lid, r in synth.resources("staging", "Compute", "Custom::AWSCDK-EKS-KubernetesResource").items()
        if lid.startswith("FsxVolume")
    ]
    text = json.dumps(manifest["Properties"]["Manifest"])
    assert "hyperpod-ns-training" in text and "fsx.csi.aws.com" in text
    [addon] = [
        r for r in synth.resources("staging", "Compute", "AWS::EKS::Addon").values() if r["Properties"]["AddonName"] == "aws-fsx-csi-driver"
    ]
    # static provisioning makes no FSx API calls: no role for the driver
    assert "ServiceAccountRoleArn" not in addon["Properties"] and "PodIdentityAssociations" not in addon["Properties"]


def _host_paths(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [value["hostPath"]] if "hostPath" in value else [p for v in value.values() for p in _host_paths(v)]
    if isinstance(value, list):
        return [p for v in value for p in _host_paths(v)]
    return []


def test_no_acceptance_manifest_mounts_fsx_by_host_path() -> None:
    plan = eks_plan(load_config(ROOT / "config" / "staging.yaml"), "r1")
    manifests = [job.manifest for job in plan.jobs]
    assert not [p for p in _host_paths(manifests) if str(p.get("path", "")).startswith(FSX_MOUNT)]
    assert _host_paths([{"hostPath": {"path": FSX_MOUNT}}]) == [{"path": FSX_MOUNT}]  # the check finds one


def test_no_template_mounts_fsx_by_host_path(synth: Synth) -> None:
    for stack in synth.all_templates():
        assert f'"path": "{FSX_MOUNT}"' not in json.dumps(stack.template), stack.display_name


def _fsx_manifest(storage_capacity_gib: int) -> Any:
    raw = read_yaml(ROOT / "config" / "staging.yaml")
    raw["storage"]["lustre"]["storage_capacity_gib"] = storage_capacity_gib
    stage = EnvironmentStage(cdk.App(context=FEATURE_FLAGS), parse_config(raw, "staging.yaml"))
    resources = Template.from_stack(stage.compute).to_json()["Resources"]
    [manifest] = [r for lid, r in resources.items() if lid.startswith("FsxVolume")]
    return manifest["Properties"]["Manifest"]


def test_growing_the_file_system_leaves_the_claims_alone() -> None:
    """Serving read, B: the claims' size followed the file system, and a static claim cannot grow
    (Kubernetes refuses a larger request on a claim without a storage class:
    docs/facts/eks.md#k8s-static-claim-not-resizable), so every Compute deploy after FSx grew failed.
    The size is the driver's example's, and the manifest does not change when the file system grows."""
    small, grown = _fsx_manifest(4800), _fsx_manifest(9600)
    assert small == grown
    example_claim = yaml.safe_load((DATA / "static-claim-v1.7.0.yaml").read_text(encoding="utf-8"))
    assert f'"storage":"{example_claim["spec"]["resources"]["requests"]["storage"]}"' in json.dumps(small, separators=(",", ":")).replace(
        "\\", ""
    )


def test_the_claims_wait_for_the_acceptance_namespaces(synth: Synth) -> None:
    """Serving read r2, unconfirmed: staging's claim in hyperpod-ns-training waited only for the quota,
    whose namespace is not documented to exist at its CREATE_COMPLETE; fminfra's own Namespace manifest
    (accept_access) creates it, and the claims now wait for that too."""
    resources = synth.template("staging", "Compute")["Resources"]
    [fsx] = [lid for lid in resources if lid.startswith("FsxVolume") and resources[lid]["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"]
    [spaces] = [lid for lid in resources if lid.startswith("AcceptNamespaces")]
    assert spaces in resources[fsx].get("DependsOn", [])
