"""Re-create the recorded schemas of this folder (README.md names each source). Run by hand, not by tests:

    python tests/data/crds/record.py MPI_CRD_YAML HYPERPOD_UNIFIED_CONFIG_PY KUBERNETES_VALIDATE_WHEEL

Every transformation is listed in README.md: descriptions dropped (size), the pieces a manifest
needs kept (the closure of their $refs), nothing else changed.
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
K8S_KINDS = {"job-batch-v1.json": "batch/v1 Job", "configmap-v1.json": "v1 ConfigMap"}
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


def mpijob(crd_yaml: Path) -> None:
    docs = [d for d in yaml.safe_load_all(crd_yaml.read_text()) if d and d.get("kind") == "CustomResourceDefinition"]
    [crd] = [d for d in docs if d["metadata"]["name"] == "mpijobs.kubeflow.org"]
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v2beta1"]
    schema = strip(version["schema"]["openAPIV3Schema"])
    (HERE / "mpijob-v2beta1.json").write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")


def hyperpod(unified_config: Path) -> None:
    spec = importlib.util.spec_from_file_location("hyperpod_unified_config", unified_config)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    schema = module._HyperPodPytorchJob.model_json_schema(by_alias=False, mode="validation")
    (HERE / "hyperpodpytorchjob-v1-spec.json").write_text(json.dumps(strip(schema), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    mpijob(Path(sys.argv[1]))
    hyperpod(Path(sys.argv[2]))
    kubernetes(Path(sys.argv[3]))
