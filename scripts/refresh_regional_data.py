#!/usr/bin/env python3
"""Write fminfra/core/regional.json from the installed cfn-lint: which of the CloudFormation resource
types fminfra creates exist in each region, and which instance types SageMaker HyperPod offers in
each region (cfn-lint keeps both from AWS's published CloudFormation schemas and price list), and the
regions the AWS::SageMaker::ComputeQuota schema's own description says it is available in.

Run after bumping cfn-lint in requirements-dev.txt; tests/test_regional.py fails while the shipped
file and the installed cfn-lint disagree (docs/facts/network.md#regional-availability).
"""

from __future__ import annotations

import json
import re
import sys
from importlib.metadata import version
from pathlib import Path

import cfnlint

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "fminfra" / "core" / "regional.json"
# The resource types whose absence in a region makes an fminfra environment undeployable there.
RESOURCE_TYPES = (
    "AWS::SageMaker::Cluster",
    "AWS::EKS::Cluster",
    "AWS::FSx::FileSystem",
    "AWS::FSx::DataRepositoryAssociation",
    "AWS::APS::Workspace",
    "AWS::APS::Scraper",
    "AWS::Grafana::Workspace",
    "AWS::EC2::CapacityReservation",
    "AWS::SageMaker::ComputeQuota",
    "AWS::SageMaker::ClusterSchedulerConfig",
)


# The resource schema's description names the regions it is offered in ("Available in 15 regions (us-east-1,
# ...)."; the CDK's CfnComputeQuota page repeats it); the provider lists disagree with it
# (docs/facts/hyperpod.md#hyperpod-compute-quota-schema), so both are kept.
DESCRIBED = re.compile(r"Available in (?P<count>\d+) regions \((?P<regions>[a-z0-9, -]+)\)")


def described_regions(schemas: Path, type_name: str) -> list[str]:
    """The regions the resource schema of TYPE_NAME names in its description."""
    found = [
        schema
        for schema in (json.loads(path.read_text()) for path in sorted((schemas / "resources").glob("*.json")))
        if schema.get("typeName") == type_name
    ]
    if len(found) != 1:
        raise SystemExit(f"refresh_regional_data: expected one resource schema of {type_name}, found {len(found)}")
    match = DESCRIBED.search(found[0].get("description", ""))
    if match is None:
        raise SystemExit(f"refresh_regional_data: the {type_name} schema's description names no regions; review the data by hand")
    regions = sorted(r.strip() for r in match["regions"].split(","))
    if len(regions) != int(match["count"]):
        raise SystemExit(f"refresh_regional_data: the {type_name} description says {match['count']} regions but names {len(regions)}")
    return regions


def build() -> dict[str, object]:
    schemas = Path(cfnlint.__file__).parent / "data" / "schemas"
    regions = sorted(p.stem for p in (schemas / "providers").glob("*-*-*.json"))
    resource_types = {}
    for region in regions:
        available = json.loads((schemas / "providers" / f"{region}.json").read_text())
        resource_types[region] = [t for t in RESOURCE_TYPES if t in available]
    enum = json.loads((schemas / "extensions" / "aws_sagemaker_cluster" / "instancetype_enum.json").read_text())
    hyperpod = {region: sorted(value["enum"]) for region, value in sorted(enum.items()) if isinstance(value, dict)}
    return {
        "source": f"PyPI cfn-lint=={version('cfn-lint')}: cfnlint/data/schemas/providers/<region>.json and "
        "cfnlint/data/schemas/extensions/aws_sagemaker_cluster/instancetype_enum.json, and the regions the "
        "AWS::SageMaker::ComputeQuota resource schema (cfnlint/data/schemas/resources/) names in its description",
        "resource_types": resource_types,
        "compute_quota_described_regions": described_regions(schemas, "AWS::SageMaker::ComputeQuota"),
        "hyperpod_instance_types": hyperpod,
    }


def main() -> int:
    TARGET.write_text(json.dumps(build(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
