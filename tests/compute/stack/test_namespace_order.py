"""Every namespaced Kubernetes object fminfra applies waits for whatever creates its namespace, read
from every template's DependsOn and reference edges: a manifest's Namespace objects, a Helm chart that
creates its namespace, a HyperPod task governance quota (`hyperpod-ns-<team>`), or the namespaces that
exist in every cluster. The API server refuses an object in a namespace that does not exist
(Kubernetes' NamespaceLifecycle admission plugin), and CDK's kubectl handler fails the stack on it.

Serving read r3, A: the FSx claims in Kueue teams' namespaces depended on the `Kueue` construct, which
holds no resource (its chart and queues are created under the EKS cluster), so they were applied
before the queues' manifest created those namespaces."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from fminfra.app.synth import build_app
from fminfra.config import load_config
from fminfra.core.assembly import read_assembly
from fminfra.eks.rules import team_queue
from tests.app.test_readme_eks import manifest_text
from tests.conftest import ROOT, Synth
from tests.hyperpod.constructs.test_eks import created_before, dependency_graph

# Namespaces every EKS cluster has (Kubernetes creates them).
BUILT_IN = {"default", "kube-system", "kube-public", "kube-node-lease"}


def _objects(resource: dict[str, Any]) -> list[dict[str, Any]]:
    return list(json.loads(manifest_text(resource["Properties"]["Manifest"])))


def _creates(resource: dict[str, Any]) -> set[str]:
    """The namespaces a resource creates."""
    kind, props = resource.get("Type"), resource.get("Properties") or {}
    if kind == "Custom::AWSCDK-EKS-KubernetesResource":
        return {o["metadata"]["name"] for o in _objects(resource) if o.get("kind") == "Namespace"}
    if kind == "Custom::AWSCDK-EKS-HelmChart" and props.get("CreateNamespace") in (True, "true"):
        return {props["Namespace"]}
    if kind == "AWS::SageMaker::ComputeQuota":
        team = (props.get("ComputeQuotaTarget") or {}).get("TeamName")
        return {team_queue("hyperpod-eks", team).namespace} if isinstance(team, str) else set()
    return set()


def early_objects(template: dict[str, Any]) -> Iterator[str]:
    """'<manifest>: <kind>/<name> in <namespace>' for each object applied before its namespace's creator."""
    resources = template.get("Resources") or {}
    edges = dependency_graph(template)
    creators = {lid: _creates(r) for lid, r in resources.items()}
    for lid, resource in resources.items():
        if resource.get("Type") != "Custom::AWSCDK-EKS-KubernetesResource":
            continue
        before = created_before(edges, lid)
        made_here = creators[lid]
        ready = BUILT_IN | made_here | {ns for other in before for ns in creators.get(other, set())}
        for obj in _objects(resource):
            namespace = (obj.get("metadata") or {}).get("namespace")
            if namespace is not None and namespace not in ready:
                yield f"{lid}: {obj['kind']}/{obj['metadata']['name']} in {namespace!r}, whose creator it does not wait for"


def test_every_object_waits_for_its_namespace(synth: Synth) -> None:
    problems = [f"{s.display_name}: {p}" for s in synth.all_templates() for p in early_objects(s.template)]
    assert not problems, "\n".join(problems)


def test_kueue_teams_with_fsx_are_checked(synth: Synth) -> None:
    """The case of the read: a Kueue cluster with the FSx claim in its teams' namespaces."""
    resources = synth.template("eks-kueue", "Compute")["Resources"]
    assert any(lid.startswith("FsxVolume") for lid in resources)


def test_the_check_fails_when_the_claims_wait_for_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test of the test: the claims' namespace creators taken away."""
    from fminfra.compute.constructs import clusters

    monkeypatch.setattr(clusters.Clusters, "_namespace_creators", lambda self: [])
    cfg = load_config(ROOT / "tests" / "configs" / "eks-kueue-untainted.yaml")
    app = cdk.App(outdir=str(tmp_path))
    build_app([cfg], app=app)
    app.synth()
    compute = next(s for s in read_assembly(tmp_path)[cfg.name] if s.display_name.endswith("/Compute"))
    assert any("PersistentVolumeClaim" in p for p in early_objects(compute.template))
