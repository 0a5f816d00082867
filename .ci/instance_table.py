#!/usr/bin/env python3
"""Write scripts/node/instance_types.tsv from fminfra/catalog.py (`make instance-table`).

The node scripts read the table; the catalog is its source (`fminfra.catalog.node_table`), and
tests/test_catalog.py fails when the file is not what the catalog renders. It lives in .ci/, not
scripts/: the node scripts' asset is the whole scripts/ folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fminfra.catalog import node_table  # noqa: E402

TABLE = ROOT / "scripts" / "node" / "instance_types.tsv"

if __name__ == "__main__":
    TABLE.write_text(node_table())
    print(f"wrote {TABLE.relative_to(ROOT)}")
