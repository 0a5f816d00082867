"""Re-create kubernetes-v1.34.0-rbac-strict.json (README.md names the source). Run by hand, not by tests:

    python tests/data/rbac/record.py KUBERNETES_VALIDATE_WHEEL

The same transformations as tests/data/crds/record.py (whose helpers it uses): descriptions dropped,
only the closure of the kinds' $refs kept, $refs pointed at #/$defs/.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).parent
K8S_DIR = "kubernetes_validate/kubernetes-json-schema/v1.34.0-local-strict/"
KINDS = (
    "namespace-v1.json",
    "role-rbac-v1.json",
    "rolebinding-rbac-v1.json",
    "clusterrole-rbac-v1.json",
    "clusterrolebinding-rbac-v1.json",
)


def _crds_record() -> object:
    spec = importlib.util.spec_from_file_location("crds_record", HERE.parent / "crds" / "record.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(wheel: Path) -> None:
    rec = _crds_record()
    with zipfile.ZipFile(wheel) as z:
        defs = json.loads(z.read(K8S_DIR + "_definitions.json"))["$defs"]
        kinds = {name: json.loads(z.read(K8S_DIR + name)) for name in KINDS}
    todo = [r for schema in kinds.values() for r in rec.refs(schema)]  # type: ignore[attr-defined]
    keep: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in keep:
            keep.add(name)
            todo.extend(rec.refs(defs[name]) - keep)  # type: ignore[attr-defined]
    out = {
        "$defs": {k: rec.relink(rec.strip(defs[k])) for k in sorted(keep)},  # type: ignore[attr-defined]
        "kinds": {name: rec.relink(rec.strip(schema)) for name, schema in kinds.items()},  # type: ignore[attr-defined]
    }
    (HERE / "kubernetes-v1.34.0-rbac-strict.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
