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
