"""Build the CDK app: one Stage per environment config, with the policy packs attached."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from fminfra.app.stage import EnvironmentStage
from fminfra.config import EnvironmentConfig, config_files, load_config
from fminfra.core.errors import ConfigError, ValidationError
from fminfra.core.rules import repeated_environment_names

DEFAULT_CONFIG_DIR = Path("config")


def build_app(
    configs: Sequence[EnvironmentConfig], *, app: cdk.App | None = None, outdir: str | None = None
) -> tuple[cdk.App, list[EnvironmentStage]]:
    """An app with one `EnvironmentStage` per config and cdk-nag's AwsSolutions pack."""
    app = app or cdk.App(outdir=outdir)
    names = [c.name for c in configs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError([f"(configs): name: environment names must be unique, repeated: {', '.join(duplicates)}"])
    stages = [EnvironmentStage(app, cfg) for cfg in configs]
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stages


def record_policy_packs(app: cdk.App, packs: Sequence[str] = ("AwsSolutions",)) -> None:
    """After a synth with cdk-nag attached: say so beside the manifest, for the gate."""
    from fminfra.core.assembly import POLICY_PACKS_FILE

    Path(app.outdir, POLICY_PACKS_FILE).write_text(json.dumps({"cdk-nag": list(packs)}) + "\n", encoding="utf-8")


def config_paths_from_context(app: cdk.App, config_dir: Path = DEFAULT_CONFIG_DIR) -> list[Path]:
    """`-c config=PATH[,PATH...]` when given, else every file of `-c config_dir=DIR` (default config/)."""
    given = app.node.try_get_context("config")
    if given:
        return [Path(p) for p in str(given).split(",") if p]
    return config_files(Path(str(app.node.try_get_context("config_dir") or config_dir)))


def pipeline_name_from_context(app: cdk.App) -> str:
    """The CDK pipeline's name, which names the acceptance step roles the acceptance roles trust:
    `-c pipeline_name=NAME`, else `name` of `-c pipeline_file=PATH` (default ./pipeline.yaml, the file
    the pipeline is synthesized from), else pipeline.yaml's default name. With `-c pipeline_account`,
    that file's account must be the one given."""
    from fminfra.config.pipeline import DEFAULT_PIPELINE_FILE, PipelineConfig, load_pipeline

    given = app.node.try_get_context("pipeline_name")
    if given:
        return str(given)
    path = Path(str(app.node.try_get_context("pipeline_file") or DEFAULT_PIPELINE_FILE))
    default = str(PipelineConfig.model_fields["name"].default)
    if not path.is_file():
        if app.node.try_get_context("pipeline_file"):
            raise ConfigError([f"{path}: (file): no such file (-c pipeline_file)"])
        return default
    pipeline, _ = load_pipeline(path)
    account = app.node.try_get_context("pipeline_account")
    if account and str(account) != pipeline.account:
        raise ConfigError([f"{path}: account: the pipeline runs in {pipeline.account}, but -c pipeline_account={account}"])
    return pipeline.name


def add_github_oidc_stacks(app: cdk.App, configs: Sequence[EnvironmentConfig]) -> None:
    """`-c github_repository=PREFIX` (the subject prefix GitHub gives for the repository, trusted as
    given: fminfra/promotion/rules.py `REPOSITORY_RULE`): also the account-level GitHub OIDC
    stacks (one per account)."""
    github_repository = app.node.try_get_context("github_repository")
    if not github_repository:
        return
    from fminfra.promotion.stack import github_oidc_stacks

    existing = str(app.node.try_get_context("github_existing_provider")).lower() == "true"
    # `-c pipeline_account=ACCOUNT`: the CDK pipeline's acceptance steps may assume the acceptance
    # roles too; the step roles are named after the pipeline (fminfra/app/pipeline.py).
    pipeline_account = app.node.try_get_context("pipeline_account")
    pipeline: dict[str, str] = {}
    if pipeline_account:
        pipeline = {"pipeline_account": str(pipeline_account), "pipeline_name": pipeline_name_from_context(app)}
    github_oidc_stacks(app, configs, repository=str(github_repository), existing_provider=existing, **pipeline)


def main() -> int:
    """Entry point of app.py: exit 2 on bad config, 1 when a policy check fails."""
    app = cdk.App()
    try:
        pipeline_file = app.node.try_get_context("pipeline")
        if pipeline_file:
            # `-c pipeline=pipeline.yaml`: the promotion pipeline stack, with every environment it
            # deploys inside it (fminfra.app.pipeline); without it, the environments as before.
            from fminfra.app.pipeline import build_pipeline_app

            build_pipeline_app(app, Path("pipeline.yaml" if pipeline_file == "true" else str(pipeline_file)))
            app.synth()
            record_policy_packs(app)
            return 0
        paths = config_paths_from_context(app)
        if not paths:
            folder = app.node.try_get_context("config_dir") or DEFAULT_CONFIG_DIR
            print(f"{folder}: (folder): no environment files (*.yaml) found", file=sys.stderr)
            return 2
        configs = []
        problems: list[str] = []
        for path in paths:
            try:
                configs.append(load_config(path))
            except ConfigError as exc:
                problems.extend(exc.problems)
        if problems:
            raise ConfigError(problems)
        if problems := repeated_environment_names({str(p): c.name for p, c in zip(paths, configs, strict=True)}):
            raise ConfigError(problems)
        build_app(configs, app=app)
        add_github_oidc_stacks(app, configs)
        app.synth()
        record_policy_packs(app)
    except ConfigError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 2
    except ValidationError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except RuntimeError as exc:
        if "ValidationFailed" in str(exc):
            print(f"policy checks failed (cdk-nag): {exc}", file=sys.stderr)
            return 1
        raise
    return 0
