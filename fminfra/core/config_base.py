"""What every config section shares: the base model, problem reporting, account and region checks,
and the names and limits the sections have in common."""

from __future__ import annotations

import re
import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

from fminfra.core.findings import Finding
from fminfra.core.regions import AZ_ID_PREFIX_BY_REGION
from fminfra.core.rules import boolean_for_number_problem, quoted_number_problem


class Problems(ValueError):
    """Raised by validators: error findings, each with a path relative to the model that found them."""

    def __init__(self, findings: list[Finding]) -> None:
        super().__init__("; ".join(f"{f.path}: {f.message}" if f.path else f.message for f in findings))
        self.findings = findings


def _raise_problems(findings: list[Finding]) -> None:
    if findings:
        raise Problems(findings)


def _numeric(annotation: Any) -> bool:
    """Whether a field takes a number (int or float, optional or not): pydantic would read a boolean as 1 or 0."""
    if annotation in (int, float):
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_numeric(a) for a in get_args(annotation) if a is not type(None))
    return False


class Model(BaseModel):
    """Base of every config section: unknown fields are errors, and a number is never a boolean
    (`count: true` is a mistake, not 1) nor a string (`count: "2"`: the schema `fminfra schema` writes
    refuses it, so validate does too)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and field is not None and _numeric(field.annotation):
            raise ValueError(boolean_for_number_problem(value))
        if isinstance(value, str) and field is not None and _numeric(field.annotation):
            raise ValueError(quoted_number_problem(value))
        return value


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
