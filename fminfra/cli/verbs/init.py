"""`fminfra init`: parse the arguments, call `fminfra.ops.init.command`, return its exit code."""

from __future__ import annotations

import argparse

from fminfra.capacity.rules import CAPACITY_TYPES
from fminfra.ops import init
from fminfra.ops.init import ORCHESTRATORS

HELP = "write a commented starter config (region, orchestrator, instance type, count, capacity)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", required=True, help="environment name: 1-16 lowercase letters, digits, hyphens")
    p.add_argument("--account", required=True, help="12-digit AWS account id")
    p.add_argument("--region", required=True, help="AWS region, e.g. us-west-2")
    p.add_argument("--orchestrator", choices=ORCHESTRATORS, default="slurm", help="default slurm; none: EKS inference only")
    p.add_argument("--instance-type", default="p5.48xlarge", help="GPU instance type (default p5.48xlarge)")
    p.add_argument(
        "--count",
        type=int,
        default=2,
        help="instances (inference: the node group's fixed size, unless compute.eks.karpenter provisions its nodes); default 2",
    )
    p.add_argument("--capacity-type", choices=CAPACITY_TYPES, default="on-demand", help="default on-demand")
    p.add_argument(
        "--reservation-id",
        action="append",
        metavar="CR_ID",
        help="with --capacity-type reservation or capacity-block: a capacity reservation id (cr-...); repeat for several",
    )
    p.add_argument("--starts-at", metavar="TIME", help="with --capacity-type capacity-block: the block's start, e.g. 2027-01-10T11:30:00Z")
    p.add_argument("--ends-at", metavar="TIME", help="with --capacity-type capacity-block: the block's end, e.g. 2027-01-17T11:30:00Z")
    p.add_argument("--training-plan-arn", help="with --capacity-type training-plan: the SageMaker training plan")
    p.add_argument("--output", help="file to write (default config/NAME.yaml); an existing file is never overwritten")


def main(ns: argparse.Namespace) -> int:
    return init.command(ns)
