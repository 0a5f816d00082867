"""Files the code needs at run time (node scripts, lifecycle scripts, the version manifest).

In a source checkout they live in `scripts/`; in an installed wheel the same tree is package
data under `fminfra/_scripts` (copied there by setup.py's build step), found through
importlib.resources.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path


def scripts_root() -> Path:
    """The folder holding `node/`, `lifecycle/` and `node/versions.env`."""
    packaged = importlib.resources.files("fminfra").joinpath("_scripts")
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[2] / "scripts"


def node_scripts_dir() -> Path:
    """`scripts/node`: bootstrap.sh, validate.sh, the install steps and their data files."""
    return scripts_root() / "node"


def versions_manifest() -> Path:
    return node_scripts_dir() / "versions.env"


def instance_table() -> Path:
    """`scripts/node/instance_types.tsv`: per-type GPU/EFA counts and NCCL thresholds for the scripts."""
    return node_scripts_dir() / "instance_types.tsv"
