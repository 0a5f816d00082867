"""AWS regions and the prefix of their Availability Zone IDs.

An AZ *name* (us-west-2a) maps to a different physical zone in each account; an AZ *ID*
(usw2-az4) is the same zone everywhere. Capacity reservations live in one physical zone, so
fminfra places everything by AZ ID and checks that each ID belongs to the configured region.
"""

from __future__ import annotations

import re

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

_AZ_ID = re.compile(r"^(?P<prefix>[a-z]+[0-9]+)-az(?P<number>[0-9]+)$")


def az_id_prefix(region: str) -> str:
    """The AZ ID prefix of a region (us-west-2 -> usw2); KeyError for an unknown region."""
    return AZ_ID_PREFIX_BY_REGION[region]


def region_of_az_id(az_id: str) -> str | None:
    """The region an AZ ID belongs to, or None when the ID is malformed or its prefix unknown."""
    match = _AZ_ID.match(az_id)
    if not match:
        return None
    for region, prefix in AZ_ID_PREFIX_BY_REGION.items():
        if prefix == match["prefix"]:
            return region
    return None


def is_az_id(value: str) -> bool:
    """True for a well-formed Availability Zone ID such as usw2-az4 (Local Zones excluded)."""
    return _AZ_ID.match(value) is not None
