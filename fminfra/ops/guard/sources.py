"""Where the guard's AFTER and BEFORE templates come from besides a folder: an in-process synth of a
config, and, with credentials, the deployed stacks' templates and CloudFormation change sets."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fminfra.core.assembly import AssemblyError as GuardInputError
from fminfra.core.assembly import Templates, read_templates
from fminfra.ops.guard.replacements import STATEFUL_TYPES, Finding, custom_name_detail, name_property
from fminfra.promotion.rules import BOOTSTRAP_QUALIFIER


def synthesize(config_path: Path) -> tuple[str, str, Templates]:
    """Synthesize one config in-process (no AWS calls): (environment, region, templates)."""
    import tempfile

    from fminfra.config import load_config

    cfg = load_config(config_path)  # before importing the CDK: bad input is one line, without jsii's start-up notices

    import aws_cdk as cdk

    from fminfra.app.synth import build_app

    context = _cdk_json_context()
    with tempfile.TemporaryDirectory(prefix="fminfra-guard-") as out:
        app = cdk.App(outdir=out, context=context)
        build_app([cfg], app=app)
        app.synth()
        return cfg.name, cfg.region, read_templates(Path(out), cfg.name)


def _cdk_json_context() -> dict[str, Any]:
    path = Path("cdk.json")
    if path.exists():
        return dict(json.loads(path.read_text()).get("context") or {})
    return {}


# --------------------------------------------------------------------------------------------
# with credentials: deployed templates and change sets


def deployed_templates(cloudformation: Any, stack_names: Iterable[str]) -> Templates:
    """The templates CloudFormation holds for these stacks (stacks not deployed yet are skipped)."""
    from botocore.exceptions import ClientError

    templates: Templates = {}
    for name in stack_names:
        try:
            body = cloudformation.get_template(StackName=name, TemplateStage="Original")["TemplateBody"]
        except ClientError as exc:
            if "does not exist" in str(exc):
                continue
            raise
        templates[name] = json.loads(body) if isinstance(body, str) else dict(body)
    return templates


# CreateChangeSet's limits (docs/facts/pipeline.md#cloudformation-template-body-limit): an inline
# TemplateBody of at most 51,200 bytes; a TemplateURL (an https:// S3 URL) to a template of at most 1 MB.
TEMPLATE_BODY_LIMIT = 51_200
TEMPLATE_URL_LIMIT = 1_000_000


def compact(template: dict[str, Any]) -> str:
    """The template as sent: compact JSON (whitespace counts against the limits and means nothing to CloudFormation)."""
    return json.dumps(template, separators=(",", ":"))


def over_inline_limit(template: dict[str, Any]) -> bool:
    return len(compact(template).encode()) > TEMPLATE_BODY_LIMIT


@dataclass(frozen=True)
class TemplateStore:
    """Where the guard puts a template too large to send inline: the environment's CDK asset bucket
    (`cdk-<qualifier>-assets-<account>-<region>`, docs/facts/pipeline.md#cdk-bootstrap-qualifier),
    under `fminfra-guard/`, deleted again once the change set is read."""

    s3: Any
    bucket: str
    region: str

    def put(self, stack: str, body: str) -> tuple[str, str]:
        key = f"fminfra-guard/{stack}-{hashlib.sha256(body.encode()).hexdigest()[:16]}.json"
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=body.encode(), ContentType="application/json")
        return key, f"https://{self.bucket}.s3.{self.region}.amazonaws.com/{key}"

    def delete(self, key: str) -> None:
        self.s3.delete_object(Bucket=self.bucket, Key=key)


def change_set_findings(
    cloudformation: Any,
    after: Templates,
    *,
    allow: Iterable[str] = (),
    store: TemplateStore | None = None,
    change_set_name: str = "fminfra-guard",
    poll_seconds: float = 5.0,
    timeout_seconds: float = 600.0,
) -> list[Finding]:
    """Create a change set per deployed stack, read CloudFormation's verdicts, delete the change set.

    A stateful resource fails when CloudFormation says `Remove`, or `Modify` with `Replacement`
    True or Conditional. Stacks not deployed yet are skipped. The template goes as compact JSON:
    inline up to 51,200 bytes, through `store` (S3, TemplateURL) up to 1 MB.
    """
    from botocore.exceptions import ClientError

    allowed = set(allow)
    findings: list[Finding] = []
    for stack, template in sorted(after.items()):
        body = compact(template)
        size = len(body.encode())
        if size > TEMPLATE_URL_LIMIT or (size > TEMPLATE_BODY_LIMIT and store is None):
            limit = "1 MB of a change set's TemplateURL" if size > TEMPLATE_URL_LIMIT else "51,200 of a change set's TemplateBody"
            raise GuardInputError(f"{stack}: (template): {size} bytes, over the {limit}")
        try:
            cloudformation.describe_stacks(StackName=stack)
        except ClientError as exc:
            if "does not exist" in str(exc):
                continue
            raise
        stored = store.put(stack, body) if size > TEMPLATE_BODY_LIMIT and store is not None else None
        source = {"TemplateURL": stored[1]} if stored else {"TemplateBody": body}
        try:
            cloudformation.create_change_set(
                StackName=stack,
                ChangeSetName=change_set_name,
                ChangeSetType="UPDATE",
                Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
                **source,
            )
            try:
                changes = _wait_for_changes(cloudformation, stack, change_set_name, poll_seconds, timeout_seconds)
            finally:
                cloudformation.delete_change_set(StackName=stack, ChangeSetName=change_set_name)
        finally:
            if stored and store is not None:
                store.delete(stored[0])
        for change in changes:
            rc = change.get("ResourceChange") or {}
            rtype, lid = rc.get("ResourceType", ""), rc.get("LogicalResourceId", "")
            unnamed = _kept_custom_name(rc, template)
            if unnamed is not None:
                findings.append(Finding(stack, lid, rtype, "unreplaceable", *unnamed, lid in allowed))
            if rtype not in STATEFUL_TYPES:
                continue
            if rc.get("Action") == "Remove":
                findings.append(Finding(stack, lid, rtype, "deleted", "(logical id)", "CloudFormation change set: Remove", lid in allowed))
            elif rc.get("Action") == "Modify" and rc.get("Replacement") in ("True", "Conditional"):
                props = sorted(
                    {
                        (d.get("Target") or {}).get("Name") or "?"
                        for d in rc.get("Details") or []
                        if (d.get("Target") or {}).get("RequiresRecreation") in ("Always", "Conditionally")
                    }
                )
                findings.append(
                    Finding(
                        stack,
                        lid,
                        rtype,
                        "replaced",
                        ", ".join(props) or "(unknown)",
                        f"CloudFormation change set: Replacement {rc['Replacement']}",
                        lid in allowed,
                    )
                )
    return findings


def _kept_custom_name(change: dict[str, Any], template: dict[str, Any]) -> tuple[str, str] | None:
    """(properties, detail) when CloudFormation would replace a resource whose custom name the change
    leaves as it is: that update fails (docs/facts/pipeline.md#cloudformation-custom-name-replacement)."""
    if change.get("Action") != "Modify" or change.get("Replacement") not in ("True", "Conditional"):
        return None
    prop = name_property(change.get("ResourceType", ""))
    resource = ((template.get("Resources") or {}).get(change.get("LogicalResourceId", "")) or {}) if prop else {}
    name = (resource.get("Properties") or {}).get(prop) if prop else None
    targets = {(d.get("Target") or {}).get("Name") for d in change.get("Details") or []}
    if name is None or prop is None or prop in targets:
        return None
    props = ", ".join(sorted(t for t in targets if t)) or "(unknown)"
    return props, custom_name_detail(f"CloudFormation change set: Replacement {change['Replacement']} replaces it, and", prop, name)


def _wait_for_changes(cloudformation: Any, stack: str, name: str, poll_seconds: float, timeout_seconds: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_seconds
    while True:
        described = cloudformation.describe_change_set(StackName=stack, ChangeSetName=name)
        status = described.get("Status")
        if status == "CREATE_COMPLETE":
            changes = list(described.get("Changes") or [])
            token = described.get("NextToken")
            while token:
                more = cloudformation.describe_change_set(StackName=stack, ChangeSetName=name, NextToken=token)
                changes.extend(more.get("Changes") or [])
                token = more.get("NextToken")
            return changes
        if status == "FAILED":
            reason = described.get("StatusReason") or ""
            if "didn't contain changes" in reason or "No updates" in reason:
                return []
            raise GuardInputError(f"{stack}: (change set): FAILED: {reason}")
        if time.monotonic() > deadline:
            raise GuardInputError(f"{stack}: (change set): still {status} after {timeout_seconds:.0f} s")
        time.sleep(poll_seconds)


def _cloudformation_client(region: str, role_arn: str | None) -> Any:
    return _session(region, role_arn).client("cloudformation")


def template_store(region: str, role_arn: str | None) -> TemplateStore:
    """The environment's CDK asset bucket, for templates over the inline limit (the caller's account)."""
    session = _session(region, role_arn)
    account = session.client("sts").get_caller_identity()["Account"]
    return TemplateStore(s3=session.client("s3"), bucket=f"cdk-{BOOTSTRAP_QUALIFIER}-assets-{account}-{region}", region=region)


def _session(region: str, role_arn: str | None) -> Any:
    import boto3

    session = boto3.session.Session(region_name=region)
    if role_arn:
        creds = session.client("sts").assume_role(RoleArn=role_arn, RoleSessionName="fminfra-guard")["Credentials"]
        session = boto3.session.Session(
            aws_access_key_id=creds["AccessKeyId"],
            aws_secret_access_key=creds["SecretAccessKey"],
            aws_session_token=creds["SessionToken"],
            region_name=region,
        )
    return session
