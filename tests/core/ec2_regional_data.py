"""The catalog's GPU instance types EC2 offers in each region, from the installed cfn-lint: its
`AWS::EC2::Instance` InstanceType enum per region (`cfnlint/data/schemas/extensions/aws_ec2_instance/
instancetype_enum.json`, built from the AWS price list; docs/facts/network.md#regional-availability).

`python -m tests.core.ec2_regional_data` rewrites fminfra/core/ec2_regional.json (review the diff)."""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path
from typing import Any

import cfnlint

from fminfra import catalog
from fminfra.core.regional import EC2_DATA

ENUM = Path(cfnlint.__file__).parent / "data" / "schemas" / "extensions" / "aws_ec2_instance" / "instancetype_enum.json"


def build() -> dict[str, Any]:
    enum = json.loads(ENUM.read_text(encoding="utf-8"))
    return {
        "source": f"PyPI cfn-lint=={version('cfn-lint')}: cfnlint/data/schemas/extensions/aws_ec2_instance/instancetype_enum.json, "
        "the types of fminfra's GPU catalog",
        "ec2_instance_types": {
            region: sorted(t for t in value["enum"] if t in catalog.CATALOG)
            for region, value in sorted(enum.items())
            if isinstance(value, dict) and region != "all"
        },
    }


if __name__ == "__main__":
    EC2_DATA.write_text(json.dumps(build(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {EC2_DATA}")
