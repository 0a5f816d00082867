"""`fminfra.ops.accept.node` runs on the login node alone, under the node's python3: Python 3.10, the
HyperPod Slurm AMI's (docs/facts/hyperpod.md#hyperpod-slurm-ami-python), with nothing installed.
So what `fminfra accept-remote` ships (`node_bundle`) must parse under 3.10's grammar, import only
the standard library and itself (relatively), type-check against 3.10's standard library (mypy's
typeshed knows which names each version has: `datetime.UTC` is 3.11), and run without site-packages."""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from fminfra.ops import common
from fminfra.ops.accept import node as node_package
from fminfra.ops.accept.node import checks as node_checks
from fminfra.ops.accept.remote import NODE_PACKAGE, node_bundle

# Standard-library modules that Python 3.10 lacks (added in 3.11: tomllib, wsgiref.types; none since
# as top-level public modules); sys.stdlib_module_names is that of the Python running the tests.
NEWER_THAN_3_10 = {"tomllib"}


def portability_problems(folder: Path, version: tuple[int, int]) -> list[str]:
    """file: why, for each module of `folder` that the node's Python could not load."""
    problems = []
    stdlib = set(sys.stdlib_module_names) - NEWER_THAN_3_10
    for path in sorted(folder.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(), str(path), feature_version=version)
        except SyntaxError as exc:
            problems.append(f"{path.name}: line {exc.lineno}: not Python {version[0]}.{version[1]} syntax: {exc.msg}")
            continue
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module != "__future__":
                names = [node.module or ""]
            problems += [
                f"{path.name}: line {node.lineno}: imports {n}, not the standard library" for n in names if n.split(".")[0] not in stdlib
            ]
    return problems


def mypy_problems(package: Path, version: tuple[int, int], tmp_path: Path) -> str:
    """mypy's findings on `package` (a folder named as it travels) against `version`'s standard library only."""
    config = tmp_path / "mypy.ini"
    config.write_text(f"[mypy]\npython_version = {version[0]}.{version[1]}\ncheck_untyped_defs = True\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(config),
            "--no-site-packages",
            "--cache-dir",
            str(tmp_path / "cache"),
            package.name,
        ],
        cwd=package.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    return "" if result.returncode == 0 else result.stdout + result.stderr


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run folder as the starting session unpacks it."""
    run = tmp_path_factory.mktemp("run")
    with tarfile.open(fileobj=io.BytesIO(node_bundle()), mode="r:gz") as tar:
        tar.extractall(run, filter="data")
    return run


def test_the_shipped_code_is_python_3_10_and_standard_library_only(shipped: Path, tmp_path: Path) -> None:
    package = shipped / "lib" / NODE_PACKAGE
    assert sorted(p.name for p in package.glob("*.py")) == [
        "__init__.py",
        "__main__.py",
        "checks.py",
        "placement.py",
        "results.py",
        "runner.py",
    ]
    assert node_package.PYTHON_VERSION == (3, 10)
    assert portability_problems(package, node_package.PYTHON_VERSION) == []
    assert mypy_problems(package, node_package.PYTHON_VERSION, tmp_path) == ""


def test_the_shipped_code_runs_without_site_packages(shipped: Path) -> None:
    """`python3 -s -m fminfra_accept_node` from lib/, as the start script runs it; -S here: no
    site-packages at all, so neither fminfra nor PyYAML nor pydantic can be found. A bad plan is one line, exit 2."""
    (shipped / "plan.json").write_text("{}")
    result = subprocess.run(
        [sys.executable, "-S", "-s", "-m", NODE_PACKAGE, "../plan.json", "--timeout-s", "1", "--poll-s", "1"],
        cwd=shipped / "lib",
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr.startswith("../plan.json: not a plan of this fminfra version:") and result.stderr.count("\n") == 1


def test_the_shipped_scripts_are_what_the_jobs_read(shipped: Path) -> None:
    assert (shipped / "scripts" / "jobs" / "nccl-tests.sbatch").is_file()
    assert sorted(p.name for p in (shipped / "scripts" / "node").iterdir()) == ["manifest.sh", "versions.env"]


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("import yaml\n", "imports yaml, not the standard library"),
        ("from fminfra.core import errors\n", "imports fminfra.core, not the standard library"),
        ("import tomllib\n", "imports tomllib, not the standard library"),
        ("try:\n    pass\nexcept* ValueError:\n    pass\n", "not Python 3.10 syntax"),
        ("type Alias = int\n", "not Python 3.10 syntax"),
    ],
)
def test_the_check_finds_what_3_10_cannot_load(tmp_path: Path, source: str, problem: str) -> None:
    """The test of the test: each of these fails the check, and relative and __future__ imports pass."""
    (tmp_path / "ok.py").write_text("from __future__ import annotations\n\nimport json\n\nfrom .checks import Check\n")
    (tmp_path / "bad.py").write_text(source)
    (found,) = portability_problems(tmp_path, (3, 10))
    assert found.startswith("bad.py: line ") and problem in found


def test_mypy_finds_names_3_10_lacks(tmp_path: Path) -> None:
    """The test of the mypy check: datetime.UTC (3.11) and a package outside the standard library."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from datetime import UTC\n\nimport yaml\n")
    found = mypy_problems(package, (3, 10), tmp_path)
    assert 'Module "datetime" has no attribute "UTC"' in found and '"yaml"' in found


def test_the_exit_codes_are_fminfras() -> None:
    assert (node_checks.EXIT_OK, node_checks.EXIT_CHECK_FAILED, node_checks.EXIT_BAD_INPUT) == (
        common.EXIT_OK,
        common.EXIT_CHECK_FAILED,
        common.EXIT_BAD_INPUT,
    )
