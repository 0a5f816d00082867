"""Packaging: build the wheel, install it into a fresh virtual environment and synthesize an
environment from the installed copy, run from a folder outside the repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

APP = r"""
import json, os, sys
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_iam as iam

import fminfra
from fminfra.config import load_config
from fminfra.constructs.node_bootstrap import NodeBootstrap, NodeBootstrapProps
from fminfra.core.resources import scripts_root
from fminfra.synth import build_app
from fminfra.core.versions import version

config, outdir, context = sys.argv[1], sys.argv[2], json.loads(Path(sys.argv[3]).read_text())["context"]
app = cdk.App(outdir=outdir, context=context)
cfg = load_config(Path(config))
build_app([cfg], app=app)
stage = cdk.Stage(app, "nodes", env=cdk.Environment(account=cfg.account, region=cfg.region))
stack = cdk.Stack(stage, "Bootstrap")
bootstrap = NodeBootstrap(stack, "Scripts", NodeBootstrapProps(instance_type="p5.48xlarge"))
bootstrap.grant_read(iam.Role(stack, "NodeRole", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com")))
app.synth()
print(json.dumps({
    "fminfra": fminfra.__file__,
    "scripts_root": str(scripts_root()),
    "bootstrap_executable": os.access(scripts_root() / "node" / "bootstrap.sh", os.X_OK),
    "nccl": version("NCCL_VERSION"),
    "asset": bootstrap.asset.asset_path,
    "env": cfg.name,
}))
"""


@dataclass(frozen=True)
class Installed:
    """The built wheel installed into a fresh virtual environment."""

    python: Path
    site: Path


def copy_package_sources(src: Path) -> None:
    """What the wheel is built from, copied, so that build/ and *.egg-info never land in the checkout."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("fminfra", "scripts"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)


def build_wheel(src: Path, dist: Path) -> Path:
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(src)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = dist.glob("fminfra-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """Build the wheel from a copy of the sources and install it into a fresh venv (once per module)."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    src = tmp_path / "src"
    copy_package_sources(src)
    wheel = build_wheel(src, tmp_path / "dist")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    packaged = ("node/bootstrap.sh", "node/validate.sh", "node/lib.sh", "node/versions.env", "node/instance_types.tsv")
    jobs = (
        "jobs/common.sh",
        "jobs/nccl-tests.sbatch",
        "jobs/ddp-smoke.sbatch",
        "jobs/ddp_smoke.py",
        "jobs/fsx-probe.sbatch",
        "jobs/fio_probe.sh",
    )
    for path in packaged + jobs:
        assert f"fminfra/_scripts/{path}" in names
    assert "fminfra/constructs/hyperpod_dependencies_handler/index.py" in names  # the installer Lambda's asset

    # A fresh venv; its dependencies come from the test environment through a .pth file, so
    # nothing is downloaded. The installed fminfra comes first on sys.path.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    venv_python = venv / "bin" / "python"
    venv_site = Path(
        subprocess.run(
            [str(venv_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (venv_site / "zz_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv_python), "install", "--no-deps", "--no-index", "--quiet", str(wheel)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert installed.returncode == 0, installed.stderr
    return Installed(python=venv_python, site=venv_site)


@pytest.mark.slow
def test_wheel_installs_and_synthesizes_from_the_installed_copy(installed: Installed, tmp_path: Path) -> None:
    venv_python, venv_site = installed.python, installed.site
    app_dir = tmp_path / "elsewhere"
    app_dir.mkdir()
    (app_dir / "app.py").write_text(APP)
    shutil.copy2(ROOT / "config" / "dev.yaml", app_dir / "dev.yaml")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"  # node for jsii
    result = subprocess.run(
        [str(venv_python), "app.py", "dev.yaml", str(app_dir / "cdk.out"), str(ROOT / "cdk.json")],
        cwd=app_dir,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert Path(report["fminfra"]).is_relative_to(venv_site)
    assert Path(report["scripts_root"]) == venv_site / "fminfra" / "_scripts"
    assert report["bootstrap_executable"] is True
    assert report["nccl"] == (ROOT / "scripts/node/versions.env").read_text().split("NCCL_VERSION=", 1)[1].split()[0]
    assert (app_dir / "cdk.out" / "assembly-nodes" / report["asset"] / "node" / "bootstrap.sh").is_file()
    templates = list((app_dir / "cdk.out").glob(f"assembly-{report['env']}/*.template.json"))
    assert len(templates) >= 2, templates


def readme_library_app() -> tuple[str, str]:
    """The app.py and cdk.json that README's "Use as a library" section shows."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Use as a library", 1)[1].split("\n## ", 1)[0]
    python_block = section.split("```python\n", 1)[1].split("```", 1)[0]
    json_block = section.split("```json\n", 1)[1].split("```", 1)[0]
    return python_block, json_block


@pytest.mark.slow
def test_readme_library_app_synthesizes_from_the_wheel_in_an_empty_folder(installed: Installed, tmp_path: Path) -> None:
    """README's library app, as written there, with the CDK CLI run in a folder holding nothing else."""
    app_py, cdk_json = readme_library_app()
    (tmp_path / "app.py").write_text(app_py)
    (tmp_path / "cdk.json").write_text(cdk_json)
    shutil.copy2(ROOT / "config" / "dev.yaml", tmp_path / "dev.yaml")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    # The venv's python3 first (as after `source .venv/bin/activate`), then node from the test venv.
    env["PATH"] = f"{installed.python.parent}:{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["CDK_DISABLE_CLI_TELEMETRY"] = "true"
    result = subprocess.run(
        [str(ROOT / "node_modules" / ".bin" / "cdk"), "synth", "--quiet", "--no-notices", "dev/*"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert len(list((tmp_path / "cdk.out").glob("assembly-dev/*.template.json"))) == 5
    # Quiet: no warning (the stage's feature flags settle the cross-stack reference strength).
    assert "WARNING" not in result.stderr, result.stderr
