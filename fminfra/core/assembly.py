"""The one reader of synthesized templates: a cloud assembly (cdk.out) by environment and stack
(`read_assembly`), or templates by stack name from an assembly or a folder of `*.template.json`
(`read_templates`, checked for the shape readers rely on), and the baseline writer."""

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


Templates = dict[str, dict[str, Any]]  # stack name -> template


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
    AutoScalingGroup<group name without punctuation>. The longest name wins, so `reserved-one` is not
    taken for `reserved`."""
    names = sorted(group_names, key=len, reverse=True)
    return next((n for n in names if logical_id.startswith("AutoScalingGroup" + re.sub(r"[^A-Za-z0-9]", "", n))), None)


# Templates by stack name, checked for the shape readers rely on: the guard's baselines and AFTER
# templates, and cost's folders of templates.


def read_templates(directory: Path, environment: str | None = None) -> Templates:
    """Templates by stack name from a folder of `<stack>.template.json` files or a cloud assembly.

    A cloud assembly (a folder with manifest.json, such as cdk.out or cdk.out/assembly-dev) is read
    through its manifests, so stack names come from there; `environment` picks one stage of it.
    """
    if not directory.is_dir():
        raise AssemblyError(f"{directory}: (folder): no such folder")
    if (directory / "manifest.json").exists():
        return _read_assembly_dir(directory, environment)
    templates: Templates = {}
    for path in sorted(directory.glob("*.template.json")):
        templates[path.name.removesuffix(".template.json")] = _read_template(path)
    if not templates:
        raise AssemblyError(f"{directory}: (folder): no *.template.json files")
    return templates


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AssemblyError(f"{path}: (file): no such file") from None
    except (OSError, UnicodeDecodeError, RecursionError) as exc:
        raise AssemblyError(f"{path}: (file): cannot read {what}: {type(exc).__name__}") from None
    except ValueError as exc:  # json.JSONDecodeError, and integers over Python's digit limit
        raise AssemblyError(f"{path}: (file): not {what}: {str(exc).splitlines()[0]}") from None


def _read_template(path: Path) -> dict[str, Any]:
    """One template, checked for the shape the guard reads: a mapping whose Resources and Outputs
    are mappings of mappings, each resource with a string Type."""
    template = _read_json(path, "a JSON template")
    if not isinstance(template, dict):
        raise AssemblyError(f"{path}: (template): must be a JSON object, got {type(template).__name__}")
    for section in ("Resources", "Outputs"):
        entries = template.get(section) or {}
        if not isinstance(entries, dict) or not all(isinstance(v, dict) for v in entries.values()):
            raise AssemblyError(f"{path}: {section}: must map logical ids to objects")
    for lid, res in (template.get("Resources") or {}).items():
        if not isinstance(res.get("Type"), str) or not isinstance(res.get("Properties") or {}, dict):
            raise AssemblyError(f"{path}: Resources.{lid}: needs a string Type and an object of Properties")
    return template


def _read_assembly_dir(directory: Path, environment: str | None, depth: int = 0) -> Templates:
    manifest_path = directory / "manifest.json"
    manifest = _read_json(manifest_path, "a cloud assembly manifest")
    artifacts_map = manifest.get("artifacts") if isinstance(manifest, dict) else None
    if not isinstance(artifacts_map, dict) or not all(isinstance(a, dict) for a in artifacts_map.values()):
        raise AssemblyError(f"{manifest_path}: artifacts: must map artifact ids to objects (is this a cloud assembly?)")
    artifacts = list(artifacts_map.values())
    # With nested stage assemblies and an environment, only that stage's stacks (not, say, the
    # pipeline stack beside them); a stage's own assembly folder is read whole.
    nested = any(a.get("type") == "cdk:cloud-assembly" for a in artifacts)
    templates: Templates = {}
    for artifact_id, artifact in artifacts_map.items():
        props = artifact.get("properties") or {}
        kind = artifact.get("type")
        if kind not in ("aws:cloudformation:stack", "cdk:cloud-assembly"):
            continue
        key = "templateFile" if kind == "aws:cloudformation:stack" else "directoryName"
        target = props.get(key) if isinstance(props, dict) else None
        if not isinstance(target, str) or not target or Path(target).is_absolute() or ".." in Path(target).parts:
            raise AssemblyError(f"{manifest_path}: artifacts.{artifact_id}.properties.{key}: must be a relative path inside the assembly")
        if kind == "aws:cloudformation:stack" and not (nested and environment):
            path = directory / target
            name = props.get("stackName")
            templates[name if isinstance(name, str) and name else path.name.removesuffix(".template.json")] = _read_template(path)
        elif kind == "cdk:cloud-assembly":
            name = str(props.get("displayName", ""))
            if environment is None or name == environment or name.endswith(f"/{environment}"):
                if depth >= 8:
                    raise AssemblyError(f"{manifest_path}: artifacts.{artifact_id}: cloud assemblies nested more than 8 deep")
                templates.update(_read_assembly_dir(directory / target, None, depth + 1))
    if not templates:
        raise AssemblyError(f"{directory}: (assembly): no stacks{f' of environment {environment}' if environment else ''}")
    return templates


def write_baseline(templates: Templates, directory: Path) -> list[Path]:
    """Replace the baseline folder's templates with these (sorted keys, stable diffs)."""
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.template.json"):
        old.unlink()
    written = []
    for stack, template in sorted(templates.items()):
        path = directory / f"{stack}.template.json"
        path.write_text(json.dumps(template, indent=1, sort_keys=True) + "\n")
        written.append(path)
    return written


# What CDK's kubectl provider applies (aws_eks_v2 KubernetesManifest): its Manifest is a JSON list of objects,
# a string or an Fn::Join of strings and tokens. `cost` and `diagram` read Karpenter's and others' objects from it.
KUBERNETES_MANIFEST = "Custom::AWSCDK-EKS-KubernetesResource"
_PLACEHOLDER = "@@fminfra-token-{}@@"


def manifest_objects(value: Any) -> tuple[list[dict[str, Any]], list[Any]]:
    """The Kubernetes objects of a manifest resource's `Manifest` (a JSON string, or an Fn::Join of
    strings and tokens), each token replaced by a placeholder that `tokens_in` maps back; ([], []) when
    it is not JSON."""
    if isinstance(value, str):
        parts: list[Any] = [value]
    elif isinstance(value, dict) and isinstance(value.get("Fn::Join"), list) and value["Fn::Join"][0] == "":
        parts = list(value["Fn::Join"][1])
    else:
        return [], []
    tokens = [p for p in parts if not isinstance(p, str)]
    text, i = "", 0
    for part in parts:
        if isinstance(part, str):
            text += part
        else:
            text += _PLACEHOLDER.format(i)
            i += 1
    try:
        objects = json.loads(text)
    except ValueError:
        return [], []
    objects = objects if isinstance(objects, list) else [objects]
    return [o for o in objects if isinstance(o, dict)], tokens


def tokens_in(text: Any, tokens: list[Any]) -> list[Any]:
    """The tokens whose placeholders `text` holds (a manifest field's value)."""
    return [t for i, t in enumerate(tokens) if _PLACEHOLDER.format(i) in json.dumps(text)]
