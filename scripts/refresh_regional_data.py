#!/usr/bin/env python3
"""Write fminfra/core/regional.json from the installed cfn-lint: which of the CloudFormation resource
types fminfra creates exist in each region, and which instance types SageMaker HyperPod offers in
each region (cfn-lint keeps both from AWS's published CloudFormation schemas and price list).

Run after bumping cfn-lint in requirements-dev.txt; tests/test_regional.py fails while the shipped
file and the installed cfn-lint disagree (docs/facts/network.md#regional-availability).
"""

from __future__ import annotations

import json
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
        "cfnlint/data/schemas/extensions/aws_sagemaker_cluster/instancetype_enum.json",
        "resource_types": resource_types,
        "hyperpod_instance_types": hyperpod,
    }


def main() -> int:
    TARGET.write_text(json.dumps(build(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
