#!/usr/bin/env python3
"""What CloudFormation is doing with one environment's stacks, after a deploy step failed.

A deploy can outlive the job's credentials: CloudFormation goes on with the stack operation (it
acts through the bootstrap execution role, not the caller's session) while the CDK CLI, unable
to poll, fails (docs/facts/pipeline.md#cloudformation-operation-continues-without-caller).
The deploy workflow runs this after a failed deploy, with fresh read-only credentials, so the
log says which stacks are still changing, which resources they are working on and what to do.

Exit 0: every stack of the environment is settled and not failed; 1: something is still in
progress, failed or rolled back; 2: bad input or no credentials.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SETTLED_OK = ("CREATE_COMPLETE", "UPDATE_COMPLETE", "IMPORT_COMPLETE")


def describe(cloudformation: Any, stack_names: list[str], region: str) -> tuple[list[str], bool]:
    """Report lines and whether everything is settled and healthy."""
    lines: list[str] = []
    healthy = True
    for name in stack_names:
        try:
            stacks = cloudformation.describe_stacks(StackName=name)["Stacks"]
        except cloudformation.exceptions.ClientError as exc:
            if "does not exist" in str(exc):
                lines.append(f"{name}: not deployed")
                continue
            raise
        status = stacks[0]["StackStatus"]
        reason = stacks[0].get("StackStatusReason")
        lines.append(f"{name}: {status}" + (f" ({reason})" if reason else ""))
        if status in SETTLED_OK:
            continue
        healthy = False
        if status.endswith("_IN_PROGRESS"):
            resources = cloudformation.describe_stack_resources(StackName=name)["StackResources"]
            for r in resources:
                if r["ResourceStatus"].endswith("_IN_PROGRESS"):
                    lines.append(f"  still working on {r['LogicalResourceId']} ({r['ResourceType']}): {r['ResourceStatus']}")
            lines.append(
                f"  CloudFormation continues without this job; wait until it settles before re-running: "
                f"aws cloudformation wait stack-update-complete --stack-name {name} --region {region} "
                f"(or describe-stack-events for progress)"
            )
        events = cloudformation.describe_stack_events(StackName=name)["StackEvents"][:5]
        for e in events:
            why = f": {e['ResourceStatusReason']}" if e.get("ResourceStatusReason") else ""
            lines.append(f"  {e['Timestamp']} {e['LogicalResourceId']} {e['ResourceStatus']}{why}")
    return lines, healthy


def main(argv: list[str] | None = None, cloudformation: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--app", default="cdk.out", type=Path, help="the cloud assembly that was being deployed")
    parser.add_argument("--environment", required=True)
    parser.add_argument("--config-dir", default="config", type=Path)
    ns = parser.parse_args(argv)
    from fminfra.config import load_config
    from fminfra.core.assembly import read_assembly

    if not (ns.app / "manifest.json").is_file():
        print(f"{ns.app}: no cloud assembly (manifest.json) to read the stack names from", file=sys.stderr)
        return 2
    stacks = read_assembly(ns.app).get(ns.environment)
    if not stacks:
        print(f"{ns.app}: no stacks of environment {ns.environment!r}", file=sys.stderr)
        return 2
    region = load_config(ns.config_dir / f"{ns.environment}.yaml").region
    if cloudformation is None:
        import boto3
        import botocore.exceptions

        try:
            cloudformation = boto3.client("cloudformation", region_name=region)
            lines, healthy = describe(cloudformation, [s.stack_name for s in stacks], region)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:  # no or expired credentials
            print(f"stack-status: cannot read the stacks of {ns.environment} in {region}: {exc}", file=sys.stderr)
            return 2
    else:
        lines, healthy = describe(cloudformation, [s.stack_name for s in stacks], region)
    print(f"CloudFormation, environment {ns.environment} ({region}):")
    print("\n".join(lines))
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
