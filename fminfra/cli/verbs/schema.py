"""`fminfra schema`: parse the arguments, call `fminfra.ops.schema.command`, return its exit code."""

from __future__ import annotations

import argparse

from fminfra.ops import schema

HELP = "print the JSON Schema of the config"


def add_arguments(p: argparse.ArgumentParser) -> None:
    del p  # no arguments


def main(ns: argparse.Namespace) -> int:
    return schema.command(ns)
