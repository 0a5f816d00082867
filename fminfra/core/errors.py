"""Errors that fminfra raises for bad input.

Both carry messages meant for a person: they name the field, what is allowed and what was given.
The CLI prints them one per line and exits 2, never with a traceback.

A construct's `ValidationError` carries its problems as `Finding`s (`fminfra.core.findings`), the
type config validation and preflight report in, so a caller that collects findings (a config
validator wrapping a construct rule, a tool that lists every problem) reads one shape everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

from fminfra.core.findings import Finding


class ValidationError(ValueError):
    """A construct or catalog input breaks an AWS or fminfra rule.

    `ValidationError(message, path="count")` or `ValidationError([finding, ...])`. `findings` holds
    the problems (level "error"); `path` is the prop or field a finding is about, relative to the
    construct's props ("" when the message itself names it). `str()` is the messages, one per line.
    """

    def __init__(self, problem: str | Finding | Sequence[Finding], *, path: str = "") -> None:
        if isinstance(problem, str):
            findings = [Finding(path, "error", problem)]
        elif isinstance(problem, Finding):
            findings = [problem]
        else:
            findings = list(problem)
        if not findings or any(f.level != "error" for f in findings):
            raise TypeError("ValidationError needs at least one finding, each of level 'error'")
        super().__init__("\n".join(f.message for f in findings))
        self.findings = findings


class ConfigError(Exception):
    """One or more problems in a config file, each already formatted as `FILE: field: message`."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
