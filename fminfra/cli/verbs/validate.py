"""`fminfra validate`: parse the arguments, call `fminfra.ops.validate.command`, return its exit code."""

from __future__ import annotations

import argparse

from fminfra.ops import validate

HELP = "validate config files, folders of them, or pipeline.yaml; prints FILE: ok for each"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "configs",
        nargs="+",
        metavar="PATH",
        help="config file, environment name (config/NAME.yaml), folder of config files, or pipeline.yaml",
    )


def main(ns: argparse.Namespace) -> int:
    return validate.command(ns)
