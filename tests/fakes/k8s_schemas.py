"""Validate Kubernetes objects against the schemas recorded in tests/data/crds (README.md there).

- batch/v1 Job, v1 ConfigMap, apps/v1 Deployment, v1 Service, policy/v1 PodDisruptionBudget,
  v1 ServiceAccount and v1 Namespace: Kubernetes v1.34.0's strict JSON schemas (unknown fields
  rejected), from PyPI kubernetes-validate==1.37.0.
- CRDs, each version's openAPIV3Schema; metadata against Kubernetes' ObjectMeta. The API server
  prunes unknown fields of a CRD object, but kubectl's default strict field validation
  (`--validate=strict`) rejects them: each schema is closed here (`additionalProperties: false`
  wherever properties are listed and neither additionalProperties nor
  x-kubernetes-preserve-unknown-fields is) to model that. CEL rules (x-kubernetes-validations) are
  not checked.
  - MPIJob kubeflow.org/v2beta1: as the HyperPod dependency chart installs it.
  - ScaledObject and TriggerAuthentication keda.sh/v1alpha1: KEDA 2.20.2, as its chart
    (kedacore/charts v2.20.2) installs them.
  - LeaderWorkerSet leaderworkerset.x-k8s.io/v1: kubernetes-sigs/lws v0.10.0's chart.
- HyperPodPyTorchJob sagemaker.amazonaws.com/v1: `spec` against the JSON schema of the public
  pydantic model of its spec (the CRD itself ships only inside the EKS add-on); apiVersion, kind
  and metadata (ObjectMeta) checked here.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import jsonschema

CRDS = Path(__file__).resolve().parents[1] / "data" / "crds"


@functools.cache
def _kubernetes() -> dict[str, Any]:
    return json.loads((CRDS / "kubernetes-v1.34.0-strict.json").read_text())


def _close(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: _close(v) for k, v in node.items()}
        if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_close(v) for v in node]
    return node


def _object_meta() -> dict[str, Any]:
    return {"$ref": "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}


KINDS = {
    ("batch/v1", "Job"): "job-batch-v1.json",
    ("v1", "ConfigMap"): "configmap-v1.json",
    ("apps/v1", "Deployment"): "deployment-apps-v1.json",
    ("v1", "Service"): "service-v1.json",
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudget-policy-v1.json",
    ("v1", "ServiceAccount"): "serviceaccount-v1.json",
    ("v1", "Namespace"): "namespace-v1.json",
}
CRD_FILES = {
    ("kubeflow.org/v2beta1", "MPIJob"): "mpijob-v2beta1.json",
    ("keda.sh/v1alpha1", "ScaledObject"): "keda-scaledobject-v1alpha1.json",
    ("keda.sh/v1alpha1", "TriggerAuthentication"): "keda-triggerauthentication-v1alpha1.json",
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "leaderworkerset-v1.json",
}


@functools.cache
def schemas() -> dict[tuple[str, str], dict[str, Any]]:
    k8s = _kubernetes()
    defs = dict(k8s["$defs"])
    out: dict[tuple[str, str], dict[str, Any]] = {key: {**k8s["kinds"][name], "$defs": defs} for key, name in KINDS.items()}
    for key, name in CRD_FILES.items():
        crd = _close(json.loads((CRDS / name).read_text()))
        crd["properties"]["metadata"] = _object_meta()
        crd["$defs"] = defs
        out[key] = crd
    spec = json.loads((CRDS / "hyperpodpytorchjob-v1-spec.json").read_text())
    out[("sagemaker.amazonaws.com/v1", "HyperPodPyTorchJob")] = {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "sagemaker.amazonaws.com/v1"},
            "kind": {"const": "HyperPodPyTorchJob"},
            "metadata": _object_meta(),
            "spec": {k: v for k, v in spec.items() if k != "$defs"},
        },
        "$defs": {**defs, **spec["$defs"]},
    }
    return out


def validate(manifest: dict[str, Any]) -> list[str]:
    """Problems of one object ('path: message'); [] when it validates. An unknown kind is a problem."""
    key = (manifest.get("apiVersion"), manifest.get("kind"))
    schema = schemas().get(key)  # type: ignore[arg-type]
    if schema is None:
        return [f"no recorded schema for {key}"]
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path)) or '.'}: {e.message}" for e in validator.iter_errors(copy.deepcopy(manifest))]
