"""Files the code needs at run time (node scripts, lifecycle scripts, the version manifest).

In a source checkout they live in `scripts/`; in an installed wheel the same tree is package
data under `fminfra/_scripts`, found through importlib.resources.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path


def scripts_root() -> Path:
    """The folder holding `node/`, `lifecycle/` and `node/versions.env`."""
    packaged = importlib.resources.files("fminfra").joinpath("_scripts")
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parent.parent / "scripts"


def versions_manifest() -> Path:
    return scripts_root() / "node" / "versions.env"
