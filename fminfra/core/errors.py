"""Errors that fminfra raises for bad input.

Both carry messages meant for a person: they name the field, what is allowed and what was given.
The CLI prints them one per line and exits 2, never with a traceback.
"""

from __future__ import annotations


class ValidationError(ValueError):
    """A construct or catalog input breaks an AWS or fminfra rule."""


class ConfigError(Exception):
    """One or more problems in a config file, each already formatted as `FILE: field: message`."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
