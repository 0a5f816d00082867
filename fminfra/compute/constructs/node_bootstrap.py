"""The node scripts as a CDK asset, and the user-data commands that fetch and run them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from fminfra import catalog
from fminfra.compute.rules import INSTALL_DIR_RULE, NODE_ENV_NAME_RULE
from fminfra.core.errors import ValidationError
from fminfra.core.resources import scripts_root

# Names user data may not override: they choose what the scripts trust or where they write.
_ENV_RESERVED = {"FMINFRA_ROOT", "FMINFRA_VERSIONS", "FMINFRA_INSTANCE_TABLE", "FMINFRA_ALLOW_UNVERIFIED"}
_MAX_BACKOFF_S = 30


@dataclass(frozen=True, kw_only=True)
class NodeBootstrapProps:
    """Props of `NodeBootstrap`.

    instance_type: the nodes' instance type, EC2 or HyperPod (`ml.`) form; must be in the GPU
      catalog. Passed to `bootstrap.sh --instance-type`, so the scripts need no instance metadata.
    mode: "install" installs what the AMI lacks (ec2 and EKS launch templates); "verify" only
      checks what the AMI carries against the manifest (AMIs that ship the stack). Default: install.
    scripts_dir: the folder published as the asset. Default: `fminfra.core.resources.scripts_root()`
      (the checkout's `scripts/`, or the installed wheel's copy).
    install_dir: where nodes unpack the scripts. Default: /opt/fminfra.
    download_attempts: attempts of `aws s3 cp` before user data fails, with a capped back-off
      (2, 8, 18, 30, 30... seconds). Default: 5.
    environment: extra settings for the scripts, `FMINFRA_*` name -> value (values may be tokens,
      for example `FMINFRA_REMOTE_WRITE_URL` from a Prometheus workspace). Default: none.
    """

    instance_type: str
    mode: Literal["install", "verify"] = "install"
    scripts_dir: Path | None = None
    install_dir: str = "/opt/fminfra"
    download_attempts: int = 5
    environment: dict[str, str] = field(default_factory=dict)


def _validate(props: NodeBootstrapProps, scripts: Path) -> None:
    catalog.get(props.instance_type)  # raises naming the known types
    if props.mode not in ("install", "verify"):
        raise ValidationError(f"mode must be install or verify, got {props.mode!r}", path="mode")
    if not (scripts / "node" / "bootstrap.sh").is_file():
        raise ValidationError(f"scripts_dir must contain node/bootstrap.sh, got {str(scripts)!r}", path="scripts_dir")
    if not INSTALL_DIR_RULE.match(props.install_dir) or props.install_dir.rstrip("/") in ("", "/tmp"):  # noqa: S108 (refused, not used)
        raise ValidationError(
            f"install_dir must be an absolute path of letters, digits, '.', '_', '-' and '/' other than / and /tmp, got {props.install_dir!r}",
            path="install_dir",
        )
    if not 1 <= props.download_attempts <= 20:
        raise ValidationError(f"download_attempts must be 1-20, got {props.download_attempts}", path="download_attempts")
    for name, value in props.environment.items():
        if not NODE_ENV_NAME_RULE.match(name) or name in _ENV_RESERVED:
            raise ValidationError(
                f"environment: names must match FMINFRA_[A-Z0-9_]+ and not be one of {', '.join(sorted(_ENV_RESERVED))}, got {name!r}"
            )
        if not cdk.Token.is_unresolved(value) and ("'" in value or "\n" in value):
            raise ValidationError(f"environment: {name}: value must not contain a single quote or newline, got {value!r}")


class NodeBootstrap(Construct):
    """Publishes the node scripts (`scripts/`, with the version manifest) as an S3 asset and
    provides the user-data commands that download it (with retries), unpack it and run
    `node/bootstrap.sh` for the props' instance type.

    Attributes: `asset` (the `aws_s3_assets.Asset`), `commands` (bash lines for user data),
    `bootstrap_path` (where bootstrap.sh lands on the node). Methods: `grant_read(grantee)`
    (s3:GetObject on exactly this asset's object), `add_to_user_data(user_data)`.
    """

    def __init__(self, scope: Construct, construct_id: str, props: NodeBootstrapProps) -> None:
        super().__init__(scope, construct_id)
        scripts = props.scripts_dir or scripts_root()
        _validate(props, scripts)
        self.asset = s3_assets.Asset(self, "Scripts", path=str(scripts), exclude=["__pycache__", "*.pyc"])
        install_dir = props.install_dir.rstrip("/")
        self.bootstrap_path = f"{install_dir}/node/bootstrap.sh"
        instance_type = catalog.normalize_instance_type(props.instance_type)
        args = f"--instance-type {instance_type}" + (" --verify" if props.mode == "verify" else "")
        env = "".join(f"{name}='{value}' " for name, value in sorted(props.environment.items()))
        attempts = props.download_attempts
        archive = f"{install_dir}.zip"
        self.commands: list[str] = [
            "fminfra_node_bootstrap() {",
            "  local attempt",
            f"  for attempt in $(seq 1 {attempts}); do",
            f"    if aws s3 cp --only-show-errors --region {cdk.Aws.REGION} '{self.asset.s3_object_url}' '{archive}'; then break; fi",
            f"    if [ \"$attempt\" -eq {attempts} ]; then echo 'fminfra: could not download the node scripts' >&2; return 1; fi",
            f"    sleep $(( attempt * attempt * 2 > {_MAX_BACKOFF_S} ? {_MAX_BACKOFF_S} : attempt * attempt * 2 ))",
            "  done",
            f"  rm -rf '{install_dir}' && mkdir -p '{install_dir}'",
            f"  python3 -m zipfile -e '{archive}' '{install_dir}'",
            f"  {env}bash '{self.bootstrap_path}' {args}",
            "}",
            "fminfra_node_bootstrap",
        ]

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Lets the nodes' role read exactly this asset's object (no bucket-wide wildcard)."""
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["s3:GetObject"],
            resource_arns=[self.asset.bucket.arn_for_objects(self.asset.s3_object_key)],
        )

    def add_to_user_data(self, user_data: ec2.UserData) -> None:
        """Appends the download-unpack-run commands to a Linux user data."""
        user_data.add_commands(*self.commands)
