"""Packaging hook: the wheel carries `scripts/` (node and lifecycle scripts, the version manifest)
as package data under `fminfra/_scripts`, where `fminfra.core.resources.scripts_root()` finds it.
Everything else about the package is in pyproject.toml."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SCRIPTS = Path(__file__).resolve().parent / "scripts"


class BuildPyWithScripts(build_py):
    """build_py that also copies scripts/ into the built package, keeping file modes."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "fminfra" / "_scripts"
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(SCRIPTS, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildPyWithScripts})
