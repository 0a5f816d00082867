"""`fminfra accept`: parse the arguments, call `fminfra.ops.accept.command`, return its exit code."""

from __future__ import annotations

import argparse
from pathlib import Path

from fminfra.cli.help import ENV_HELP
from fminfra.ops import accept

HELP = "run the acceptance jobs (NCCL, DDP, FSx) on a deployed environment, or --serving the serving gate; --dry-run prints them"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", metavar="ENV", help=ENV_HELP)
    p.add_argument("--dry-run", action="store_true", help="print what would be submitted and the thresholds; offline")
    p.add_argument(
        "--pipeline", type=Path, help="pipeline.yaml with per-environment accept thresholds (default: ./pipeline.yaml if present)"
    )
    p.add_argument("--run-id", help="name of the run folder under /fsx/fminfra-accept (default: ENV-<UTC time>)")
    p.add_argument(
        "--timeout-minutes",
        type=float,
        default=60.0,
        help="give up waiting after this long: for the jobs, or --serving for each model to be ready after a deploy (default 60)",
    )
    p.add_argument(
        "--poll-seconds",
        type=float,
        default=30.0,
        help="seconds between polls: sacct, or --serving a model that is not ready yet (default 30)",
    )
    p.add_argument("--report", type=Path, help="JSON report path (default: RUN/accept.json; --serving: accept-serving-ENV.json)")
    p.add_argument(
        "--serving", action="store_true", help="the serving gate: streamed completions to each served model, checked against accept.serving"
    )
    p.add_argument(
        "--endpoint",
        action="append",
        metavar="MODEL=URL",
        help="--serving: the model's base URL (default: its Service's load balancer, read with kubectl); repeatable",
    )
    p.add_argument(
        "--if-gated", action="store_true", help="--serving: exit 0 without a request where pipeline.yaml turns the serving gate off"
    )


def main(ns: argparse.Namespace) -> int:
    return accept.command(ns)
