"""Reading a synthesized cloud assembly (cdk.out): environments, stacks and templates."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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


def read_assembly(outdir: Path) -> dict[str, list[StackTemplate]]:
    """Stacks by environment (Stage id), in manifest order, from an app of EnvironmentStages."""
    manifest = json.loads((outdir / "manifest.json").read_text())
    result: dict[str, list[StackTemplate]] = {}
    for artifact_id, artifact in (manifest.get("artifacts") or {}).items():
        if artifact.get("type") != "cdk:cloud-assembly":
            continue
        stage_dir = outdir / artifact["properties"]["directoryName"]
        stage_manifest = json.loads((stage_dir / "manifest.json").read_text())
        environment = artifact["properties"].get("displayName") or artifact_id.removeprefix("assembly-")
        stacks: list[StackTemplate] = []
        for stack_id, stack in (stage_manifest.get("artifacts") or {}).items():
            if stack.get("type") != "aws:cloudformation:stack":
                continue
            path = stage_dir / stack["properties"]["templateFile"]
            stacks.append(
                StackTemplate(
                    environment=environment,
                    stack_name=stack["properties"].get("stackName", stack_id),
                    display_name=stack.get("displayName", stack_id),
                    path=path,
                    template=json.loads(path.read_text()),
                )
            )
        result[environment] = stacks
    return result
