"""Packaging hook: the wheel carries `scripts/` (node and lifecycle scripts, the version manifest)
as package data under `fminfra/_scripts`, where `fminfra.core.resources.scripts_root()` finds it.
Everything else about the package is in pyproject.toml.

The packaged scripts' modes follow one rule, not the source's: a CodePipeline source zip drops
them (docs/facts/pipeline.md#codepipeline-source-zip-no-modes), so a wheel built there from copied
modes would carry no executable script. A file that starts with `#!` is 0755, every other 0644
(docs/promotion.md, "File modes")."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SCRIPTS = Path(__file__).resolve().parent / "scripts"


class BuildPyWithScripts(build_py):
    """build_py that also copies scripts/ into the built package, with modes by `packaged_mode`."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "fminfra" / "_scripts"
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(SCRIPTS, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        for path in target.rglob("*"):
            if path.is_file():
                path.chmod(packaged_mode(path))


def packaged_mode(path: Path) -> int:
    """0755 for a script that starts with `#!` (it is run directly), 0644 for anything else."""
    with path.open("rb") as fh:
        return 0o755 if fh.read(2) == b"#!" else 0o644


setup(cmdclass={"build_py": BuildPyWithScripts})
