"""AWS regions and the prefix of their Availability Zone IDs.

An AZ *name* (us-west-2a) maps to a different physical zone in each account; an AZ *ID*
(usw2-az4) is the same zone everywhere. Capacity reservations live in one physical zone, so
fminfra places everything by AZ ID and checks that each ID belongs to the configured region and
is one that AWS lists for it (offline, from the dated table below).
"""

from __future__ import annotations

import re

# Prefixes: docs/facts/network.md#az-id-prefix-commercial, #az-id-prefix-govcloud, #az-id-prefix-china.
AZ_ID_PREFIX_BY_REGION: dict[str, str] = {
    "us-east-1": "use1",
    "us-east-2": "use2",
    "us-west-1": "usw1",
    "us-west-2": "usw2",
    "ca-central-1": "cac1",
    "ca-west-1": "caw1",
    "mx-central-1": "mxc1",
    "sa-east-1": "sae1",
    "eu-west-1": "euw1",
    "eu-west-2": "euw2",
    "eu-west-3": "euw3",
    "eu-central-1": "euc1",
    "eu-central-2": "euc2",
    "eu-north-1": "eun1",
    "eu-south-1": "eus1",
    "eu-south-2": "eus2",
    "ap-east-1": "ape1",
    "ap-east-2": "ape2",
    "ap-northeast-1": "apne1",
    "ap-northeast-2": "apne2",
    "ap-northeast-3": "apne3",
    "ap-southeast-1": "apse1",
    "ap-southeast-2": "apse2",
    "ap-southeast-3": "apse3",
    "ap-southeast-4": "apse4",
    "ap-southeast-5": "apse5",
    "ap-southeast-6": "apse6",
    "ap-southeast-7": "apse7",
    "ap-south-1": "aps1",
    "ap-south-2": "aps2",
    "me-south-1": "mes1",
    "me-central-1": "mec1",
    "il-central-1": "ilc1",
    "af-south-1": "afs1",
    "us-gov-west-1": "usgw1",
    "us-gov-east-1": "usge1",
    "cn-north-1": "cnn1",
    "cn-northwest-1": "cnnw1",
}

# The AZ IDs AWS lists for each commercial region, as of AZ_IDS_CHECKED
# (docs/facts/network.md#az-ids-by-region). Numbers are not contiguous (use1 has no az3 for newer
# accounts but AWS lists it; cac1 skips az3; usw1 lists az1-az3, newer accounts see two). A region
# AWS opens later, or a new zone, needs a new row here: until then validate rejects it in one line.
AZ_IDS_CHECKED = "2026-11-30"
_AZ_NUMBERS: dict[str, tuple[int, ...]] = {
    "us-east-1": (1, 2, 3, 4, 5, 6),
    "us-east-2": (1, 2, 3),
    "us-west-1": (1, 2, 3),
    "us-west-2": (1, 2, 3, 4),
    "ca-central-1": (1, 2, 4),
    "ca-west-1": (1, 2, 3),
    "mx-central-1": (1, 2, 3),
    "sa-east-1": (1, 2, 3),
    "eu-west-1": (1, 2, 3),
    "eu-west-2": (1, 2, 3, 4),
    "eu-west-3": (1, 2, 3),
    "eu-central-1": (1, 2, 3),
    "eu-central-2": (1, 2, 3),
    "eu-north-1": (1, 2, 3),
    "eu-south-1": (1, 2, 3),
    "eu-south-2": (1, 2, 3),
    "ap-east-1": (1, 2, 3),
    "ap-east-2": (1, 2, 3),
    "ap-northeast-1": (1, 2, 3, 4),
    "ap-northeast-2": (1, 2, 3, 4),
    "ap-northeast-3": (1, 2, 3),
    "ap-southeast-1": (1, 2, 3),
    "ap-southeast-2": (1, 2, 3),
    "ap-southeast-3": (1, 2, 3),
    "ap-southeast-4": (1, 2, 3),
    "ap-southeast-5": (1, 2, 3),
    "ap-southeast-6": (1, 2, 3),
    "ap-southeast-7": (1, 2, 3),
    "ap-south-1": (1, 2, 3),
    "ap-south-2": (1, 2, 3),
    "me-south-1": (1, 2, 3),
    "me-central-1": (1, 2, 3),
    "il-central-1": (1, 2, 3),
    "af-south-1": (1, 2, 3),
}
# GovCloud and China: no AWS page lists their AZ IDs (docs/facts/network.md#az-id-prefix-govcloud,
# #az-id-prefix-china), so any number with the right prefix is accepted there.
AZ_IDS_BY_REGION: dict[str, tuple[str, ...] | None] = {
    region: (tuple(f"{prefix}-az{n}" for n in _AZ_NUMBERS[region]) if region in _AZ_NUMBERS else None)
    for region, prefix in AZ_ID_PREFIX_BY_REGION.items()
}

_AZ_ID = re.compile(r"^(?P<prefix>[a-z]+[0-9]+)-az(?P<number>[0-9]+)$")


def az_id_prefix(region: str) -> str:
    """The AZ ID prefix of a region (us-west-2 -> usw2); KeyError for an unknown region."""
    return AZ_ID_PREFIX_BY_REGION[region]


def region_of_az_id(az_id: str) -> str | None:
    """The region an AZ ID belongs to, or None when the ID is malformed, its prefix unknown, or
    the region's table does not list it (usw2-az9)."""
    match = _AZ_ID.match(az_id)
    if not match:
        return None
    for region, prefix in AZ_ID_PREFIX_BY_REGION.items():
        if prefix == match["prefix"]:
            known = AZ_IDS_BY_REGION[region]
            return region if known is None or az_id in known else None
    return None


def az_id_problem(az_id: str, region: str) -> str | None:
    """Why AZ_ID is not an Availability Zone of REGION (None when it is), in one clause."""
    prefix = AZ_ID_PREFIX_BY_REGION[region]
    match = _AZ_ID.match(az_id)
    if match and match["prefix"] == prefix:
        known = AZ_IDS_BY_REGION[region]
        if known is None or az_id in known:
            return None
        return f"{az_id!r} is not an AZ ID of {region}; AWS lists {', '.join(known)} (as of {AZ_IDS_CHECKED})"
    owner = region_of_az_id(az_id)
    where = f"belongs to {owner}" if owner else "belongs to no known region"
    return f"{az_id!r} {where}, not {region} (its AZ IDs start with {prefix}-)"


def is_az_id(value: str) -> bool:
    """True for a well-formed Availability Zone ID such as usw2-az4 (Local Zones excluded)."""
    return _AZ_ID.match(value) is not None
