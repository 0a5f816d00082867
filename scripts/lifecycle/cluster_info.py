"""What the lifecycle scripts need from HyperPod's resource_config.json and fminfra's
provisioning_parameters.json, one answer per call (the shell scripts run it with `python3`).

usage: python3 cluster_info.py PARAMS RESOURCE_CONFIG COMMAND [ARG...]
  param KEY        one top-level value of the parameters ("" when absent; JSON for non-strings)
  node IP...       "<group> <instance type> <role> <gpu>" of the instance holding one of these IPs;
                   role: controller | login | compute | eks; gpu: 1 when the group is in gpu_groups
  addresses GROUP  the groups' instances' CustomerIpAddress values, comma-separated
  plan GROUP       "<training plan ARN> <drain seconds>" of a training-plan group ("" for any other)

resource_config.json (written by HyperPod; docs/facts/hyperpod.md#hyperpod-resource-config-path):
InstanceGroups[].Name, .InstanceType, .Instances[].CustomerIpAddress. Bad input: one line naming the
file and the field on stderr, exit 2.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def fail(message: str) -> None:
    print(f"cluster_info: {message}", file=sys.stderr)
    sys.exit(2)


def load(path: str, what: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        fail(f"{path}: no such file ({what})")
    except json.JSONDecodeError as e:
        fail(f"{path}: not valid JSON at line {e.lineno} ({what})")
    if not isinstance(data, dict):
        fail(f"{path}: must be a JSON object ({what})")
    return data


def groups(resource_config: dict[str, Any], path: str) -> list[dict[str, Any]]:
    value = resource_config.get("InstanceGroups")
    if not isinstance(value, list):
        fail(f"{path}: InstanceGroups: must be a list of instance groups")
    return value


def role_of(params: dict[str, Any], group: str, path: str) -> str:
    if params.get("workload_manager") == "eks":
        return "eks"
    if group == params.get("controller_group"):
        return "controller"
    if params.get("login_group") and group == params.get("login_group"):
        return "login"
    workers = [g.get("instance_group_name") for g in params.get("worker_groups", [])]
    if group in workers:
        return "compute"
    fail(
        f"{path}: instance group {group!r} is neither controller_group, login_group nor one of worker_groups ({', '.join(map(str, workers))})"
    )
    return ""


def main(argv: list[str]) -> None:
    if len(argv) < 4:
        fail("usage: cluster_info.py PARAMS RESOURCE_CONFIG param KEY | node IP... | addresses GROUP | plan GROUP")
    params_path, config_path, command, args = argv[1], argv[2], argv[3], argv[4:]
    params = load(params_path, "fminfra's provisioning parameters")
    if command == "param":
        value = params.get(args[0], "") if args else fail("param needs a KEY")
        print(value if isinstance(value, str) else json.dumps(value))
        return
    if command == "plan":
        wanted = args[0] if args else fail("plan needs a GROUP")
        drain = (params.get("plan_drains") or {}).get(wanted)
        if drain is None:
            print("")
            return
        arn, seconds = drain.get("training_plan_arn"), drain.get("drain_seconds")
        if not isinstance(arn, str) or not arn or not isinstance(seconds, int) or seconds < 1:
            fail(f"{params_path}: plan_drains.{wanted}: needs training_plan_arn (a string) and drain_seconds (a positive integer)")
        print(arn, seconds)
        return
    config = load(config_path, "HyperPod's resource config")
    if command == "node":
        ips = set(args)
        for group in groups(config, config_path):
            for instance in group.get("Instances") or []:
                if instance.get("CustomerIpAddress") in ips:
                    name = group.get("Name")
                    if not isinstance(name, str) or not name:
                        fail(f"{config_path}: InstanceGroups[].Name: missing for the group holding {instance['CustomerIpAddress']}")
                    gpu = "1" if name in params.get("gpu_groups", []) else "0"
                    print(name, group.get("InstanceType") or "-", role_of(params, name, params_path), gpu)
                    return
        fail(
            f"{config_path}: InstanceGroups[].Instances[].CustomerIpAddress: none is one of this node's addresses ({' '.join(sorted(ips))})"
        )
    if command == "addresses":
        wanted = args[0] if args else fail("addresses needs a GROUP")
        for group in groups(config, config_path):
            if group.get("Name") == wanted:
                print(",".join(i["CustomerIpAddress"] for i in group.get("Instances") or [] if i.get("CustomerIpAddress")))
                return
        fail(f"{config_path}: InstanceGroups[].Name: no group {wanted!r}")
    fail(f"unknown command {command!r}; use param, node, addresses or plan")


if __name__ == "__main__":
    main(sys.argv)
