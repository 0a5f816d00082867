"""`fminfra accept-remote`: parse the arguments, call `fminfra.ops.accept.remote.command`, return its exit code."""

from __future__ import annotations

import argparse
from pathlib import Path

from fminfra.cli.help import ENV_HELP
from fminfra.ops.accept import remote as accept_remote_ops

HELP = "run `fminfra accept ENV` from CI: on a HyperPod Slurm login node through SSM, on EKS from here"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", metavar="ENV", help=ENV_HELP)
    p.add_argument("--dry-run", action="store_true", help="print the session, the command and what accept would submit; offline")
    p.add_argument("--pipeline", type=Path, help="pipeline.yaml (default: ./pipeline.yaml if present): thresholds and accept.gate")
    p.add_argument("--if-gated", action="store_true", help="do nothing (exit 0) when pipeline.yaml turns the gate off for ENV")
    p.add_argument("--run-id", help="run folder under /fsx/fminfra-accept (default: ENV-<UTC time>)")
    p.add_argument("--timeout-minutes", type=float, default=60.0, help="accept's own timeout (default 60)")
    p.add_argument("--poll-seconds", type=float, default=30.0, help="seconds between sessions and between sacct polls (default 30)")
    p.add_argument(
        "--remote-python",
        default="python3",
        help="the node's Python, 3.10 or later, standard library only: the gate ships its own code (default python3)",
    )
    p.add_argument("--remote-user", default="ubuntu", help="run as this user on the node ('' = root; default ubuntu)")


def main(ns: argparse.Namespace) -> int:
    return accept_remote_ops.command(ns)
