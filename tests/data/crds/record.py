"""Re-create the recorded schemas of this folder (README.md names each source). Run by hand, not by tests:

    python tests/data/crds/record.py MPI_CRD_YAML HYPERPOD_UNIFIED_CONFIG_PY KUBERNETES_VALIDATE_WHEEL \
        KEDA_SCALEDOBJECTS_YAML KEDA_TRIGGERAUTHENTICATIONS_YAML LWS_CRD_YAML

Every transformation is listed in README.md: descriptions dropped (size), the pieces a manifest
needs kept (the closure of their $refs), Helm template lines of a chart's CRD file (metadata only)
dropped before parsing, nothing else changed.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import zipfile
from pathlib import Path

import yaml

HERE = Path(__file__).parent
K8S_DIR = "kubernetes_validate/kubernetes-json-schema/v1.34.0-local-strict/"
K8S_KINDS = {
    "job-batch-v1.json": "batch/v1 Job",
    "configmap-v1.json": "v1 ConfigMap",
    "deployment-apps-v1.json": "apps/v1 Deployment",
    "service-v1.json": "v1 Service",
    "poddisruptionbudget-policy-v1.json": "policy/v1 PodDisruptionBudget",
    "serviceaccount-v1.json": "v1 ServiceAccount",
    "namespace-v1.json": "v1 Namespace",
}
K8S_PIECES = ("io.k8s.api.core.v1.PodTemplateSpec", "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")


def strip(node: object) -> object:
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def refs(node: object) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                found.add(v.rsplit("/", 1)[-1])
            else:
                found |= refs(v)
    elif isinstance(node, list):
        for v in node:
            found |= refs(v)
    return found


def relink(node: object) -> object:
    if isinstance(node, dict):
        return {k: ("#/$defs/" + v.rsplit("/", 1)[-1] if k == "$ref" else relink(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [relink(v) for v in node]
    return node


def kubernetes(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        defs = json.loads(z.read(K8S_DIR + "_definitions.json"))["$defs"]
        kinds = {name: json.loads(z.read(K8S_DIR + name)) for name in K8S_KINDS}
    wanted = set(K8S_PIECES)
    for schema in kinds.values():
        wanted |= refs(schema)
    todo, keep = list(wanted), set()
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        todo.extend(refs(defs[name]) - keep)
    out = {
        "$defs": {k: relink(strip(defs[k])) for k in sorted(keep)},
        "kinds": {name: relink(strip(schema)) for name, schema in kinds.items()},
    }
    (HERE / "kubernetes-v1.34.0-strict.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


def crd(crd_yaml: Path, name: str, version: str, out: str) -> None:
    """The openAPIV3Schema of one version of CRD `name`; a Helm chart's `{{ ... }}` lines (its metadata) dropped."""
    text = "\n".join(line for line in crd_yaml.read_text().splitlines() if "{{" not in line)
    docs = [d for d in yaml.safe_load_all(text) if d and d.get("kind") == "CustomResourceDefinition"]
    [found] = [d for d in docs if d["metadata"]["name"] == name]
    [served] = [v for v in found["spec"]["versions"] if v["name"] == version]
    schema = strip(served["schema"]["openAPIV3Schema"])
    (HERE / out).write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")


def hyperpod(unified_config: Path) -> None:
    spec = importlib.util.spec_from_file_location("hyperpod_unified_config", unified_config)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    schema = module._HyperPodPytorchJob.model_json_schema(by_alias=False, mode="validation")
    (HERE / "hyperpodpytorchjob-v1-spec.json").write_text(json.dumps(strip(schema), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    crd(Path(sys.argv[1]), "mpijobs.kubeflow.org", "v2beta1", "mpijob-v2beta1.json")
    hyperpod(Path(sys.argv[2]))
    kubernetes(Path(sys.argv[3]))
    crd(Path(sys.argv[4]), "scaledobjects.keda.sh", "v1alpha1", "keda-scaledobject-v1alpha1.json")
    crd(Path(sys.argv[5]), "triggerauthentications.keda.sh", "v1alpha1", "keda-triggerauthentication-v1alpha1.json")
    crd(Path(sys.argv[6]), "leaderworkersets.leaderworkerset.x-k8s.io", "v1", "leaderworkerset-v1.json")
