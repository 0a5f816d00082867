"""Reading a synthesized cloud assembly (cdk.out): environments, stacks and templates."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fminfra.core.errors import ValidationError

# Written beside the manifest by `fminfra.app.synth` after a synth with the policy packs attached, so
# that the gate can say whether cdk-nag ran (CloudFormation templates do not record it).
POLICY_PACKS_FILE = "fminfra-policy-packs.json"


class AssemblyError(ValidationError):
    """A folder that holds no readable cloud assembly: one line, exit 2."""


@dataclass(frozen=True)
class StackTemplate:
    """One synthesized stack: its environment, name, file and template."""

    environment: str
    stack_name: str
    display_name: str
    path: Path
    template: dict[str, Any]

    @property
    def resource_count(self) -> int:
        return len(self.template.get("Resources") or {})


APP_STACKS = "(app)"


def read_assembly(outdir: Path, *, include_app_stacks: bool = False) -> dict[str, list[StackTemplate]]:
    """Stacks by environment (Stage id), in manifest order, from an app of EnvironmentStages.

    With include_app_stacks, stacks outside any Stage (the pipeline stack, the GitHub OIDC stacks)
    come under the key APP_STACKS. AssemblyError when the folder holds no cloud assembly.
    """
    manifest_path = outdir / "manifest.json"
    if not manifest_path.is_file():
        raise AssemblyError(f"{outdir}: (assembly): no cloud assembly here (no manifest.json); run `make synth` first")
    manifest = _json(manifest_path)
    result: dict[str, list[StackTemplate]] = {}
    for artifact_id, artifact in (manifest.get("artifacts") or {}).items():
        if include_app_stacks and artifact.get("type") == "aws:cloudformation:stack":
            result.setdefault(APP_STACKS, []).append(_stack(APP_STACKS, outdir, artifact_id, artifact))
        if artifact.get("type") != "cdk:cloud-assembly":
            continue
        stage_dir = outdir / artifact["properties"]["directoryName"]
        stage_manifest = _json(stage_dir / "manifest.json")
        environment = artifact["properties"].get("displayName") or artifact_id.removeprefix("assembly-")
        result[environment] = [
            _stack(environment, stage_dir, stack_id, stack)
            for stack_id, stack in (stage_manifest.get("artifacts") or {}).items()
            if stack.get("type") == "aws:cloudformation:stack"
        ]
    return result


def _json(path: Path) -> dict[str, Any]:
    """A JSON object from the assembly; AssemblyError (one line) when it is missing, not JSON or not an object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AssemblyError(f"{path}: (file): not a readable JSON file: {exc}") from None
    if not isinstance(value, dict):
        raise AssemblyError(f"{path}: (file): must be a JSON object, got {type(value).__name__}")
    return value


def _stack(environment: str, folder: Path, stack_id: str, stack: dict[str, Any]) -> StackTemplate:
    path = folder / stack["properties"]["templateFile"]
    return StackTemplate(
        environment=environment,
        stack_name=stack["properties"].get("stackName", stack_id),
        display_name=stack.get("displayName", stack_id),
        path=path,
        template=_json(path),
    )


def launch_template_instance_type(template: dict[str, Any], reference: Any) -> str | None:
    """The instance type of a launch template a resource references (Ref or its Id/Name)."""
    if not isinstance(reference, dict):
        return None
    target = reference.get("LaunchTemplateId") or reference.get("LaunchTemplateName") or reference.get("Id") or reference
    logical = None
    if isinstance(target, dict):
        logical = target.get("Ref") or (target.get("Fn::GetAtt") or [None])[0]
    resource = (template.get("Resources") or {}).get(logical or "", {})
    data = (resource.get("Properties") or {}).get("LaunchTemplateData") or {}
    value = data.get("InstanceType")
    return value if isinstance(value, str) else None


def environment_stacks(outdir: Path, environment: str) -> list[StackTemplate]:
    """One environment's stacks from a cloud assembly; AssemblyError (one line) when it holds none."""
    stacks = read_assembly(outdir).get(environment)
    if not stacks:
        raise AssemblyError(
            f"{outdir}: (assembly): no stacks of environment {environment}; run `make synth` (or cdk synth -c config=...) first"
        )
    return stacks


def auto_scaling_group_name(logical_id: str, group_names: Iterable[str]) -> str | None:
    """The config group an Auto Scaling group belongs to: GpuAutoScalingGroup's logical id starts with
    AutoScalingGroup<group name without punctuation>."""
    return next((n for n in group_names if logical_id.startswith("AutoScalingGroup" + re.sub(r"[^A-Za-z0-9]", "", n))), None)
