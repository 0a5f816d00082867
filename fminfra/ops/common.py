"""What the commands share: exit codes, the usage error, loading several configs at once."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from fminfra.config import EnvironmentConfig, load_config, resolve_config_path
from fminfra.core.errors import ConfigError
from fminfra.core.rules import number_problem

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit 2."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are UsageErrors (one line, exit 2), not argparse's exit."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def number_argument(
    kind: type[int] | type[float], *, low: float, high: float | None = None, low_allowed: bool = True
) -> Callable[[str], float]:
    """An argparse `type=` for a number in a range: a value outside it is one line naming the flag (argparse adds it)."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a{'n integer' if kind is int else ' number'}, got {text!r}") from None
        if not math.isfinite(value):  # float() reads "inf" and "nan"
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        if problem := number_problem(value, low=low, high=high, low_allowed=low_allowed):
            raise argparse.ArgumentTypeError(problem)
        return value

    return parse


def write_output(path: Path, data: str | bytes) -> None:
    """Write what a command made to `--output PATH`; UsageError (one line) when PATH is a folder,
    its folder is missing, or the write fails."""
    if path.is_dir():
        raise UsageError(f"--output {path}: is a folder; give a file name in it")
    if not path.parent.is_dir():
        raise UsageError(f"--output {path}: no such folder {path.parent}; create it first or give another path")
    try:
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--output {path}: cannot write: {exc.strerror or exc}") from None


def load_configs(args: Sequence[str]) -> list[tuple[Path, EnvironmentConfig]]:
    """Load every CONFIG argument; ConfigError collecting the problems of all of them."""
    loaded: list[tuple[Path, EnvironmentConfig]] = []
    problems: list[str] = []
    for arg in args:
        path = resolve_config_path(arg)
        try:
            loaded.append((path, load_config(path)))
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)
    return loaded
