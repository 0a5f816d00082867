"""Validate Kubernetes objects against the schemas recorded in tests/data/crds (README.md there).

- batch/v1 Job and v1 ConfigMap: Kubernetes v1.34.0's strict JSON schemas (unknown fields rejected).
- MPIJob kubeflow.org/v2beta1: the CRD's openAPIV3Schema as the HyperPod dependency chart installs
  it; metadata against Kubernetes' ObjectMeta. The API server prunes unknown fields of a CRD
  object, but kubectl's default strict field validation (`--validate=strict`) rejects them: the
  schema is closed here (`additionalProperties: false` wherever properties are listed and neither
  additionalProperties nor x-kubernetes-preserve-unknown-fields is) to model that.
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


@functools.cache
def schemas() -> dict[tuple[str, str], dict[str, Any]]:
    k8s = _kubernetes()
    defs = dict(k8s["$defs"])
    out: dict[tuple[str, str], dict[str, Any]] = {
        ("batch/v1", "Job"): {**k8s["kinds"]["job-batch-v1.json"], "$defs": defs},
        ("v1", "ConfigMap"): {**k8s["kinds"]["configmap-v1.json"], "$defs": defs},
    }
    mpi = _close(json.loads((CRDS / "mpijob-v2beta1.json").read_text()))
    mpi["properties"]["metadata"] = _object_meta()
    mpi["$defs"] = defs
    out[("kubeflow.org/v2beta1", "MPIJob")] = mpi
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
