"""What every config section shares: the base model, problem reporting, account and region checks,
and the names and limits the sections have in common."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from fminfra.core.findings import Finding
from fminfra.core.regions import AZ_ID_PREFIX_BY_REGION


class Problems(ValueError):
    """Raised by validators: error findings, each with a path relative to the model that found them."""

    def __init__(self, findings: list[Finding]) -> None:
        super().__init__("; ".join(f"{f.path}: {f.message}" if f.path else f.message for f in findings))
        self.findings = findings


def _raise_problems(findings: list[Finding]) -> None:
    if findings:
        raise Problems(findings)


class Model(BaseModel):
    """Base of every config section: unknown fields are errors."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def check_account(value: Any) -> Any:
    """An AWS account id: a quoted string of 12 digits (shared by every config that names one)."""
    if isinstance(value, int):
        raise ValueError("must be a quoted string of 12 digits (YAML reads an unquoted number as an integer)")
    if isinstance(value, str) and not re.match(r"^[0-9]{12}$", value):
        raise ValueError(f"must be 12 digits, got {value!r}")
    return value


def check_region(value: str) -> str:
    """A region fminfra knows the AZ IDs of."""
    if value not in AZ_ID_PREFIX_BY_REGION:
        raise ValueError(f"unknown region {value!r}; known: {', '.join(AZ_ID_PREFIX_BY_REGION)}")
    return value
