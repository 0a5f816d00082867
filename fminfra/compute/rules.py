"""Compute's rules: what an instance type given by name looks like (GPU types are the catalog's), and
what the node bootstrap takes."""

from __future__ import annotations

import re

# An EC2 instance type: family, optional generation attributes, a dot and a size (m6i.large, c7gn.16xlarge).
EC2_INSTANCE_TYPE_RULE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$")
# Graviton (arm64) instance families carry a "g" after the generation digit: m7g, c8g, t4g, r8gd.
GRAVITON_TYPE_RULE = re.compile(r"^[a-z]+[0-9]+g[a-z]*\.")
# NodeBootstrap's inputs: where the scripts are installed on the node, and the FMINFRA_ variables user data sets.
INSTALL_DIR_RULE = re.compile(r"^/[A-Za-z0-9._/-]+$")
NODE_ENV_NAME_RULE = re.compile(r"^FMINFRA_[A-Z0-9_]+$")


def ec2_region_problem(instance_type: str, region: str, offered_in: list[str]) -> str:
    """An EC2 type the region does not offer (docs/facts/network.md#regional-availability)."""
    return (
        f"{instance_type} is not offered by EC2 in {region} (cfn-lint's EC2 instance types for the region, from AWS's price list); "
        f"regions that offer it: {', '.join(offered_in) or 'none'}"
    )
