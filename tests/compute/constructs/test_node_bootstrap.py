"""NodeBootstrap on a small standalone stack (not the session app): asset, grant, user data, nag."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from fminfra.compute.constructs.node_bootstrap import NodeBootstrap, NodeBootstrapProps
from fminfra.core.errors import ValidationError
from fminfra.core.resources import scripts_root

ENV = cdk.Environment(account="111111111111", region="us-west-2")


def _build(tmp_path: Path, **props: Any) -> tuple[cdk.App, cdk.Stack, NodeBootstrap, ec2.UserData]:
    app = cdk.App(outdir=str(tmp_path / "cdk.out"))
    # cdk-nag 3 validates the stacks of stages (as the session app has them), so use one here too.
    stack = cdk.Stack(cdk.Stage(app, "test", env=ENV), "Nodes")
    role = iam.Role(stack, "NodeRole", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
    bootstrap = NodeBootstrap(stack, "Bootstrap", NodeBootstrapProps(instance_type="p5.48xlarge", **props))
    bootstrap.grant_read(role)
    user_data = ec2.UserData.for_linux()
    bootstrap.add_to_user_data(user_data)
    ec2.CfnLaunchTemplate(stack, "Template", launch_template_data={"userData": cdk.Fn.base64(user_data.render())})
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stack, bootstrap, user_data


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[cdk.App, cdk.Stack, NodeBootstrap, ec2.UserData, Path]:
    tmp = tmp_path_factory.mktemp("node-bootstrap")
    app, stack, bootstrap, user_data = _build(tmp, environment={"FMINFRA_REMOTE_WRITE_URL": "https://aps.example/api/v1/remote_write"})
    app.synth()  # raises if cdk-nag finds anything
    return app, stack, bootstrap, user_data, tmp / "cdk.out"


def test_asset_holds_the_scripts_and_manifest(built: tuple) -> None:
    _, _, bootstrap, _, outdir = built
    staged = outdir / "assembly-test" / bootstrap.asset.asset_path
    assert (staged / "node" / "bootstrap.sh").is_file()
    assert (staged / "node" / "versions.env").read_text() == (scripts_root() / "node" / "versions.env").read_text()
    assert not list(staged.rglob("__pycache__"))


def test_grant_is_get_object_on_exactly_the_asset(built: tuple) -> None:
    _, stack, bootstrap, _, _ = built
    key = stack.resolve(bootstrap.asset.s3_object_key)
    bucket = stack.resolve(bootstrap.asset.s3_bucket_name)
    Template.from_stack(stack).has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": [
                    {
                        "Action": "s3:GetObject",
                        "Effect": "Allow",
                        "Resource": {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, f":s3:::{bucket}/{key}"]]},
                    }
                ]
            }
        },
    )
    policy = json.dumps(Template.from_stack(stack).find_resources("AWS::IAM::Policy"))
    assert "*" not in policy


def test_cdk_nag_reports_nothing(built: tuple) -> None:
    # The fixture's app.synth() would have raised on any finding; nothing is acknowledged either.
    *_, outdir = built
    report = json.loads((outdir / "validation-report.json").read_text())
    assert all(not p["violations"] and not p["suppressedViolations"] for p in report["pluginReports"])


def test_the_same_harness_catches_a_bucket_wide_grant(tmp_path: Path) -> None:
    # The CDK's own asset.grant_read would give s3:GetObject* on the whole staging bucket: cdk-nag
    # (IAM5) fails it, which is why grant_read names the one object.
    app, stack, bootstrap, _ = _build(tmp_path)
    bootstrap.asset.grant_read(iam.Role(stack, "Other", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com")))
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()


def test_user_data_downloads_with_retries_unpacks_and_runs_bootstrap(built: tuple) -> None:
    _, stack, _, user_data, _ = built
    text = json.dumps(stack.resolve(user_data.render()))
    assert "aws s3 cp --only-show-errors --region" in text
    assert "for attempt in $(seq 1 5)" in text and "sleep $(( attempt * attempt * 2 > 30 ? 30" in text
    assert "python3 -m zipfile -e '/opt/fminfra.zip' '/opt/fminfra'" in text
    assert (
        "FMINFRA_REMOTE_WRITE_URL='https://aps.example/api/v1/remote_write' bash '/opt/fminfra/node/bootstrap.sh' --instance-type p5.48xlarge"
        in text
    )


def test_user_data_is_valid_bash(built: tuple, tmp_path: Path) -> None:
    _, stack, _, user_data, _ = built
    rendered = stack.resolve(user_data.render())
    text = "".join(p if isinstance(p, str) else "TOKEN" for p in rendered["Fn::Join"][1]) if isinstance(rendered, dict) else rendered
    script = tmp_path / "user-data.sh"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True, check=False).returncode == 0


def test_verify_mode_and_hyperpod_names(tmp_path: Path) -> None:
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "S", env=ENV)
    bootstrap = NodeBootstrap(stack, "B", NodeBootstrapProps(instance_type="ml.p5en.48xlarge", mode="verify", install_dir="/opt/x/"))
    assert bootstrap.bootstrap_path == "/opt/x/node/bootstrap.sh"
    assert any(re.search(r"bash '/opt/x/node/bootstrap.sh' --instance-type p5en.48xlarge --verify$", c) for c in bootstrap.commands)


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"instance_type": "p9.48xlarge"}, r"instance type 'p9.48xlarge' is not in the GPU catalog; known: p4d.24xlarge"),
        ({"mode": "reinstall"}, r"mode must be install or verify, got 'reinstall'"),
        ({"install_dir": "relative"}, r"install_dir must be an absolute path .* got 'relative'"),
        ({"install_dir": "/tmp"}, r"install_dir must be an absolute path .* other than / and /tmp, got '/tmp'"),
        ({"download_attempts": 0}, r"download_attempts must be 1-20, got 0"),
        ({"environment": {"PATH": "/x"}}, r"environment: names must match FMINFRA_\[A-Z0-9_\]\+ .* got 'PATH'"),
        ({"environment": {"FMINFRA_ALLOW_UNVERIFIED": "1"}}, r"got 'FMINFRA_ALLOW_UNVERIFIED'"),
        ({"environment": {"FMINFRA_X": "a'b"}}, r"environment: FMINFRA_X: value must not contain a single quote"),
        ({"scripts_dir": Path("/nonexistent")}, r"scripts_dir must contain node/bootstrap.sh, got '/nonexistent'"),
    ],
)
def test_bad_props_name_field_allowed_and_given(tmp_path: Path, props: dict[str, Any], message: str) -> None:
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path)), "S", env=ENV)
    with pytest.raises(ValidationError, match=message):
        NodeBootstrap(stack, "B", NodeBootstrapProps(**{"instance_type": "p5.48xlarge", **props}))
