"""The rules every concept shares, and how a rule is written.

A rule (a pattern, a limit, an allowed set) and its message are defined once, in its concept's
`rules` module (`fminfra/<concept>/rules.py`; observability's in `fminfra/observability/rules/`),
and config validation and construct validation both call it: the config says
`FILE: field: must be ..., got ...`, a construct `field must be ..., got ...`, with the same words.
tests/test_rules.py fails when a rule constant is defined anywhere else.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Pattern:
    """A pattern an input must match (searched from the start: anchor it with `^...$`) and what it
    allows, in words: the one message every check of it gives."""

    expression: str
    allows: str
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "regex", re.compile(self.expression))

    def match(self, value: str) -> re.Match[str] | None:
        return self.regex.match(value)

    def problem(self, value: str) -> str | None:
        """None when `value` matches; otherwise `must be <allows>, got <value>`."""
        return None if self.regex.match(value) else f"must be {self.allows}, got {value!r}"


def one_of_problem(allowed: Iterable[object], value: object) -> str | None:
    """None when `value` is one of `allowed`; otherwise `must be one of a, b, c, got <value>`."""
    allowed = tuple(allowed)
    return None if value in allowed else f"must be one of {', '.join(map(str, allowed))}, got {value}"


# CloudWatch Logs' retention periods (PutRetentionPolicy's retentionInDays; the VPC flow log group,
# AMP's and every other log group fminfra creates).
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)

# An environment's name: it is in every physical name fminfra makes.
ENVIRONMENT_NAME = Pattern(r"^[a-z](?:[a-z0-9-]{0,14}[a-z0-9])?$", "1-16 lowercase letters, digits and hyphens, starting with a letter")


def boolean_for_number_problem(value: bool) -> str:
    """A boolean where a number belongs: pydantic would take true as 1 and false as 0."""
    return f"must be a number, got {str(value).lower()} (YAML reads unquoted true/false/yes/no/on/off as booleans)"


def quoted_number_problem(value: str) -> str:
    """A quoted number where a number belongs: pydantic would read "2" as 2, the published schema refuses it."""
    return f"must be a number, got the string {value!r} (quoted in YAML; write it without quotes)"


# `cost`: hours in a month, more than 0 and at most a 31-day month; counts of users and samples, 0 or more.
HOURS_PER_MONTH_MAX = 31 * 24


def number_problem(value: float, *, low: float, high: float | None = None, low_allowed: bool = True) -> str | None:
    """None when `value` lies in the range; otherwise `must be ... , got VALUE`."""
    above = value >= low if low_allowed else value > low
    if above and (high is None or value <= high) and value == value:  # NaN is in no range
        return None
    lower = f"{low:g} or more" if low_allowed else f"more than {low:g}"
    return f"must be {lower}{f' and at most {high:g}' if high is not None else ''}, got {value:g}"


def repeated_environment_names(names: dict[str, str]) -> list[str]:
    """FILE -> environment name, of files synthesized together (one app, one Stage per environment,
    named for it): one line for each file whose name an earlier file already has."""
    first: dict[str, str] = {}
    problems = []
    for file, name in names.items():
        if name in first:
            problems.append(
                f"{file}: name: {name!r} is already the name of {first[name]}; environment names must be unique across the files "
                "synthesized together (one Stage each); rename one"
            )
        first.setdefault(name, file)
    return problems


# docs/facts/pipeline.md#aws-tag-restrictions: keys 1-128, values 1-256 (CloudFormation stack tags
# need a value), no aws: prefix, the characters every tagging service accepts, 50 tags a resource,
# less the two fminfra adds (fminfra:environment; SageMaker on the HyperPod cluster).
TAG_KEY_MAX, TAG_VALUE_MAX, TAG_COUNT_MAX = 128, 256, 48
TAG_CHARS_RULE = re.compile(r"^[\w .:/=+\-@]*$")
# A tag given on the command line as KEY=VALUE, as EC2 takes it (a value may be empty there).
TAG_ARGUMENT_RULE = re.compile(rf"^(?P<key>[^=]{{1,{TAG_KEY_MAX}}})=(?P<value>.{{0,{TAG_VALUE_MAX}}})$")

# Limits on what the one YAML reader accepts: an environment file is a few KB, nests about six
# levels and holds small numbers; anything far past these is a mistake or an attack, and gets one
# line instead of a MemoryError, a RecursionError or Python's integer-digits ValueError.
MAX_CONFIG_BYTES = 1024 * 1024
MAX_NESTING = 64
MAX_INT_DIGITS = 64
# A file with nothing but comments (or nothing): YAML reads it as no document at all.
EMPTY_CONFIG = (
    "empty: no config sections, only comments or nothing; give version, name, account, region, network and compute "
    "(`python -m fminfra init` writes a starter file)"
)
