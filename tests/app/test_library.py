"""fminfra as a library: a stage in any CDK app, without this repository's cdk.json.

The stage sets the feature flags its templates are tested with on its own scope (unless the app
already has a value), so a bare `cdk.App()` synthesizes the same templates as `make synth`; a flag
the constructs need, set off by the app, is one clear error.
"""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
import pytest

from fminfra.app.stage import FEATURE_FLAGS, REQUIRED_FLAGS, EnvironmentStage
from fminfra.config import load_config
from fminfra.core.errors import ValidationError
from fminfra.ops.guard import read_templates
from tests.conftest import ROOT, Synth


def test_stage_in_a_bare_app_synthesizes_the_shipped_templates(synth: Synth, tmp_path: Path) -> None:
    app = cdk.App(outdir=str(tmp_path))  # no cdk.json, no context
    EnvironmentStage(app, load_config(ROOT / "config" / "dev.yaml"))
    app.synth()
    bare = read_templates(tmp_path, "dev")
    shipped = read_templates(synth.outdir, "dev")
    assert sorted(bare) == sorted(shipped)
    for name, template in shipped.items():
        assert bare[name] == template, name


def test_a_required_flag_set_off_is_one_clear_error() -> None:
    (flag,) = REQUIRED_FLAGS
    app = cdk.App(context={flag: False})
    with pytest.raises(ValidationError, match=rf"^feature flag {flag} is False in this app; fminfra needs True: remove it"):
        EnvironmentStage(app, load_config(ROOT / "config" / "dev.yaml"))


def test_the_app_keeps_its_own_value_of_an_optional_flag() -> None:
    flag = "@aws-cdk/aws-iam:minimizePolicies"
    app = cdk.App(context={flag: False})
    stage = EnvironmentStage(app, load_config(ROOT / "config" / "dev.yaml"))
    assert stage.node.try_get_context(flag) is False


def test_cdk_json_and_the_stage_agree_on_feature_flags() -> None:
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    flags = {k: v for k, v in context.items() if k.startswith("@aws-cdk")}
    assert flags == FEATURE_FLAGS


def test_app_context_feature_flags_are_the_stages_and_can_be_overridden() -> None:
    """`cdk.App(context=fminfra.FEATURE_FLAGS)` (README's library app) puts the stage's flags on the
    app, where the CDK CLI counts them; a value the app is given on top still wins."""
    import fminfra

    assert fminfra.FEATURE_FLAGS is FEATURE_FLAGS
    flag = "@aws-cdk/aws-iam:minimizePolicies"
    app = cdk.App(context={**fminfra.FEATURE_FLAGS, flag: False})
    assert all(app.node.try_get_context(k) == v for k, v in FEATURE_FLAGS.items() if k != flag)
    assert EnvironmentStage(app, load_config(ROOT / "config" / "dev.yaml")).node.try_get_context(flag) is False


def test_tags_of_the_app_stop_at_a_stage_and_tags_of_the_stage_reach_its_stacks(tmp_path: Path) -> None:
    """What README's library section says, on the pinned aws-cdk-lib: an aspect of the app (Tags.of)
    is not applied inside a Stage; Tags.of(stage) is."""
    from aws_cdk import aws_sns as sns

    app = cdk.App(outdir=str(tmp_path))
    stage = cdk.Stage(app, "env")
    sns.Topic(cdk.Stack(stage, "Stack"), "Topic")
    cdk.Tags.of(app).add("from-app", "1")
    cdk.Tags.of(stage).add("from-stage", "1")
    app.synth()
    (template,) = read_templates(tmp_path / "assembly-env").values()
    (topic,) = template["Resources"].values()
    assert topic["Properties"]["Tags"] == [{"Key": "from-stage", "Value": "1"}]
