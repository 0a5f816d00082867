"""Tests of the scripts in `.ci/` (not a package: each is loaded from its file by `ci_script`)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.conftest import ROOT


def ci_script(name: str) -> ModuleType:
    """The module of `.ci/NAME.py`, registered in sys.modules (dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / ".ci" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
