"""`schema`: print the JSON Schema of the environment config (for editors and reviews)."""

from __future__ import annotations

import argparse
import json

from fminfra.config import EnvironmentConfig
from fminfra.ops.common import EXIT_OK


def command(ns: argparse.Namespace) -> int:
    print(json.dumps(EnvironmentConfig.model_json_schema(by_alias=True), indent=2))
    return EXIT_OK
