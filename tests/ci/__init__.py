"""Tests of the scripts in `.ci/` and `scripts/` (not packages: each is loaded from its file by `ci_script`
or `load_script`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from tests.conftest import ROOT


def load_script(path: Path) -> ModuleType:
    """The module of the Python file at `path`, named by its stem and registered in sys.modules
    (dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def ci_script(name: str) -> ModuleType:
    """The module of `.ci/NAME.py`."""
    return load_script(ROOT / ".ci" / f"{name}.py")
