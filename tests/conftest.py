"""Shared fixtures. Synth is slow (a Node process behind every call), so the whole app, every
shipped config, example and test config together, is synthesized once per test session."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from cdk_nag import AwsSolutionsChecks

from fminfra.app.pipeline import PipelineStack, build_pipeline_app
from fminfra.app.stage import EnvironmentStage
from fminfra.app.synth import build_app
from fminfra.config import EnvironmentConfig, config_files, load_config
from fminfra.core.assembly import StackTemplate, read_assembly
from fminfra.promotion.stack import GithubOidcStack, github_oidc_stacks

# Every way botocore and the AWS SDKs find credentials outside the code: keys, profiles and their
# files, SSO (through profiles), web identity, and the container endpoint that CodeBuild and ECS
# provide (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI/_FULL_URI). Tests never see the machine's.
AWS_CREDENTIAL_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_CREDENTIAL_EXPIRATION",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
)


NO_AWS_CONFIG = "/nonexistent/fminfra-tests/aws-config"


def _no_machine_aws_credentials_in(environ: MutableMapping[str, str]) -> None:
    for name in AWS_CREDENTIAL_VARIABLES:
        environ.pop(name, None)
    environ["AWS_CONFIG_FILE"] = environ["AWS_SHARED_CREDENTIALS_FILE"] = NO_AWS_CONFIG
    environ["AWS_EC2_METADATA_DISABLED"] = "true"


# Already while this file and the test modules are imported (config loading reads botocore's
# models, and a profile that does not exist fails there), and for every subprocess a test starts.
_no_machine_aws_credentials_in(os.environ)


ROOT = Path(__file__).resolve().parent.parent
SHIPPED_CONFIGS = config_files(ROOT / "config")
EXAMPLE_CONFIGS = config_files(ROOT / "examples")
# Extra configs that exercise paths the shipped ones do not; synthesized in the same session.
TEST_CONFIGS = config_files(ROOT / "tests" / "configs")
ALL_CONFIGS = [*SHIPPED_CONFIGS, *EXAMPLE_CONFIGS, *TEST_CONFIGS]
SHIPPED_NAMES = [load_config(p).name for p in SHIPPED_CONFIGS]
# The repository the GitHub OIDC stacks trust in tests.
GITHUB_REPOSITORY = "example-org/fminfra"
# The tooling account of pipeline.yaml: its acceptance steps may assume the acceptance roles.
PIPELINE_ACCOUNT = "444444444444"


def cdk_synth(config: Path, out: Path, *stacks: str) -> subprocess.CompletedProcess[str]:
    """The real CDK CLI (`npx cdk synth`, the project's pinned copy) on one config, from the checkout,
    as a user runs it: the project's .venv first on PATH, no telemetry."""
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}", "CDK_DISABLE_CLI_TELEMETRY": "true"}
    return subprocess.run(
        ["npx", "--no-install", "cdk", "synth", "--quiet", "--no-notices", "-c", f"config={config}", "-o", str(out), *stacks],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=False,
        timeout=300,
    )


@dataclass(frozen=True)
class CliSynth:
    """A config synthesized by the real CDK CLI (`cdk_synth`, every stack), once per session."""

    config: Path
    data: dict[str, Any]
    outdir: Path
    result: subprocess.CompletedProcess[str]


# The config of `cli_synth_elsewhere`: dev under another name, in another region with that region's
# AZ IDs (the compute AZ not the first), and ml.p4d.24xlarge workers, which cfn-lint's eu-west-2 list
# offers and the CDK's own validator refuses (an acknowledged E3644).
ELSEWHERE_NAME, ELSEWHERE_REGION = "euro", "eu-west-2"
ELSEWHERE_AZ_IDS, ELSEWHERE_COMPUTE_AZ_ID = ["euw2-az1", "euw2-az3"], "euw2-az3"
ELSEWHERE_INSTANCE_TYPE = "ml.p4d.24xlarge"


@pytest.fixture(scope="session")
def cli_synth_elsewhere(tmp_path_factory: pytest.TempPathFactory) -> CliSynth:
    """One real `cdk synth -c config=...` of a new environment elsewhere, shared by the tests that check
    what the CLI makes of a config that is not dev (tests/cli/test_main.py, tests/core/test_regional.py:
    one xdist group, XDIST_GROUPS below, so that one worker runs them and synthesizes once)."""
    import yaml

    data = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())
    data["name"], data["region"] = ELSEWHERE_NAME, ELSEWHERE_REGION
    data["network"]["az_ids"], data["network"]["compute_az_id"] = ELSEWHERE_AZ_IDS, ELSEWHERE_COMPUTE_AZ_ID
    data["compute"]["instance_groups"][0]["instance_type"] = ELSEWHERE_INSTANCE_TYPE
    folder = tmp_path_factory.mktemp("elsewhere")
    path = folder / f"{ELSEWHERE_NAME}.yaml"
    path.write_text(yaml.safe_dump(data))
    return CliSynth(config=path, data=data, outdir=folder / "out", result=cdk_synth(path, folder / "out", "**"))


# Each pytest-xdist worker is a session of its own: a session fixture is built once per worker that
# runs a test using it, a module fixture once per worker that runs a test of the module. `make test`
# runs `--dist loadgroup` (pyproject.toml's addopts), with the scheduler below: the tests of one
# group run on one worker, so that what they share is built once per run; the groups go out first
# (largest first), then the other tests one by one to whichever worker is free. The groups, by test
# module: what the module's tests share, and the group.
XDIST_GROUPS = {
    # the pipeline and GitHub OIDC apps (the session's pipeline_synth and oidc_synth)
    "tests/app/test_contract.py": "pipeline-and-oidc-synths",
    "tests/app/test_contract_registry.py": "pipeline-and-oidc-synths",
    "tests/app/test_pipeline.py": "pipeline-and-oidc-synths",
    "tests/app/test_workflows.py": "pipeline-and-oidc-synths",
    # the wheel (the session's built_wheel), installed and synthesized from (module fixtures)
    "tests/app/test_wheel.py": "wheel",
    "tests/ci/test_codebuild_source.py": "wheel",
    # the CDK CLI's synth of a new environment elsewhere (the session's cli_synth_elsewhere)
    "tests/cli/test_main.py": "cli-synth-elsewhere",
    "tests/core/test_regional.py": "cli-synth-elsewhere",
    # a module fixture each: checkov's run, moto's published scripts, a moto account, the README's
    # components, the shipped node code, a synthesized construct or stack
    "tests/ops/test_checkov.py": "checkov",
    "tests/hyperpod/constructs/test_lifecycle_scripts.py": "lifecycle-scripts",
    "tests/ops/test_preflight.py": "preflight",
    "tests/app/test_readme_eks.py": "readme-eks",
    "tests/ops/accept/node/test_portable.py": "accept-node-portable",
    "tests/compute/constructs/test_node_bootstrap.py": "node-bootstrap",
    "tests/compute/constructs/test_launch_template.py": "launch-template",
    "tests/eks/constructs/test_extensions.py": "eks-extensions",
    "tests/promotion/test_stack.py": "promotion-stack",
}


def missing_group_modules(groups: dict[str, str], root: Path) -> list[str]:
    """The modules of XDIST_GROUPS that are not there (a module renamed or moved loses its group)."""
    return sorted(name for name in groups if not (root / name).is_file())


def xdist_group_of(nodeid: str) -> str:
    """The scheduling unit of a test: its module's group in XDIST_GROUPS, else the test itself."""
    return XDIST_GROUPS.get(nodeid.split("::", 1)[0], nodeid)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook (requirements-dev.txt pins it; addopts need it)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` by XDIST_GROUPS, read from the node ids in the controller. pytest-xdist's own
    loadgroup (xdist_group marks) groups nothing under pytest 9.2: the worker tags a node id that pytest
    no longer reads (docs/facts/pipeline.md#pytest-xdist-loadgroup-pytest-9-2)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class TableGroupScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            group = xdist_group_of(nodeid)
            return group if group != nodeid else super()._split_scope(nodeid)

    return TableGroupScheduling(config, log)


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The wheel, built once per session (tests/app/test_wheel.py, tests/ci/test_codebuild_source.py:
    one xdist group) from a copy of the package sources without file modes, as CodePipeline's source
    zip has them: setup.py's rule, not the source, gives the packaged scripts their modes, so this
    one wheel is also what a checkout with modes builds."""
    from tests.app.test_wheel import build_from, copy_package_sources
    from tests.ci.test_codebuild_source import strip_modes

    src = tmp_path_factory.mktemp("wheel") / "src"
    copy_package_sources(src)
    strip_modes(src)
    assert not [p for p in src.rglob("*") if p.is_file() and p.stat().st_mode & 0o111], "the copy kept a mode"
    return build_from(src, src.parent / "dist")


@pytest.fixture(autouse=True, scope="session")
def _no_machine_aws_credentials() -> Iterator[None]:
    """No test depends on the machine's credentials, in any form, for the whole session (set
    before any module fixture, so those that set test credentials, such as moto's, still can)."""
    with pytest.MonkeyPatch.context() as mp:
        for name in AWS_CREDENTIAL_VARIABLES:
            mp.delenv(name, raising=False)
        mp.setenv("AWS_CONFIG_FILE", NO_AWS_CONFIG)
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", NO_AWS_CONFIG)
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        yield


@dataclass
class Synth:
    """The synthesized app: stages, configs and templates by environment and stack id."""

    outdir: Path
    stages: dict[str, EnvironmentStage]
    configs: dict[str, EnvironmentConfig]
    stacks: dict[str, list[StackTemplate]]

    def template(self, env: str, stack: str) -> dict[str, Any]:
        for s in self.stacks[env]:
            if s.display_name == f"{env}/{stack}":
                return s.template
        raise KeyError(f"{env}/{stack} not synthesized; have {[s.display_name for s in self.stacks[env]]}")

    def resources(self, env: str, stack: str, resource_type: str) -> dict[str, dict[str, Any]]:
        """Resources of one type in a stack: logical id -> resource."""
        return {lid: r for lid, r in (self.template(env, stack).get("Resources") or {}).items() if r.get("Type") == resource_type}

    def all_templates(self) -> Iterator[StackTemplate]:
        for stacks in self.stacks.values():
            yield from stacks


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    outdir = tmp_path_factory.mktemp("cdk.out")
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    configs = [load_config(p) for p in ALL_CONFIGS]
    app = cdk.App(outdir=str(outdir), context=context)
    _, stages = build_app(configs, app=app)
    app.synth()
    return Synth(
        outdir=outdir,
        stages={s.cfg.name: s for s in stages},
        configs={c.name: c for c in configs},
        stacks=read_assembly(outdir),
    )


@pytest.fixture(scope="session")
def pipeline_synth(tmp_path_factory: pytest.TempPathFactory) -> tuple[PipelineStack, Path, dict[str, Any]]:
    """The promotion pipeline app (pipeline.yaml), synthesized once: stack, outdir, template."""
    outdir = tmp_path_factory.mktemp("pipeline.out")
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    app = cdk.App(outdir=str(outdir), context=context)
    cwd = Path.cwd()
    os.chdir(ROOT)
    try:
        stack = build_pipeline_app(app, Path("pipeline.yaml"))
        app.synth()
    finally:
        os.chdir(cwd)
    template = json.loads((outdir / f"{stack.artifact_id}.template.json").read_text())
    return stack, outdir, template


@pytest.fixture(scope="session")
def oidc_synth(synth: Synth, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[GithubOidcStack], Path]:
    """The account-level GitHub OIDC stacks of the shipped environments, synthesized once."""
    outdir = tmp_path_factory.mktemp("oidc.out")
    app = cdk.App(outdir=str(outdir), context=json.loads((ROOT / "cdk.json").read_text())["context"])
    configs = [synth.configs[n] for n in SHIPPED_NAMES]
    stacks = github_oidc_stacks(app, configs, repository=GITHUB_REPOSITORY, pipeline_account=PIPELINE_ACCOUNT)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()
    return stacks, outdir


_ASSET_HASH = re.compile(r"[0-9a-f]{64}")
# The lifecycle scripts' prefix is a hash of the scripts (a script change must change the URI so
# HyperPod picks it up; tests/hyperpod/constructs/test_lifecycle_scripts.py proves that), masked like an asset hash.
_LIFECYCLE_PREFIX = re.compile(r"/lifecycle/[0-9a-f]{16}/")


def mask_assets(template: dict[str, Any]) -> dict[str, Any]:
    """The template with asset hashes masked, for snapshots that survive unrelated asset edits."""
    text = _LIFECYCLE_PREFIX.sub("/lifecycle/<scripts-hash>/", _ASSET_HASH.sub("<asset-hash>", json.dumps(template)))
    return json.loads(text)
