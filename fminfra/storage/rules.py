"""Storage's rules: FSx for Lustre's capacities, tiers and limits, S3 names and prefixes, and where
the file system is mounted. The config (`storage/config.py`) and the constructs (`storage/constructs/`)
both check through these."""

from __future__ import annotations

import re

from fminfra.core.rules import Pattern

# FSx for Lustre rules: docs/facts/storage.md#fsx-lustre-ssd-capacity, #fsx-lustre-persistent2-throughput-tiers,
# #fsx-lustre-metadata-iops, #fsx-dra-limits. SSD capacity: 1200, 2400 or a multiple of 2400 GiB.
LUSTRE_THROUGHPUT_TIERS_MB_PER_TIB = (125, 250, 500, 1000)
# PERSISTENT_2 tier used when neither throughput_mb_per_tib is given: 500 MB/s/TiB gives about
# 0.5 GB/s per TiB, a middle ground between the 125/250 tiers that starve GPU fleets and 1000.
LUSTRE_DEFAULT_THROUGHPUT_MB_PER_TIB = 500
# SCRATCH_2 has a fixed baseline of 200 MB/s/TiB (bursting higher): FSx performance table.
LUSTRE_SCRATCH_2_BASELINE_MB_PER_TIB = 200
# An EFA-enabled file system is created and grown in these steps of its throughput tier (MB/s/TiB ->
# GiB); FSx refuses a capacity off the step (docs/facts/storage.md#fsx-lustre-efa-capacity-steps).
LUSTRE_EFA_CAPACITY_STEP_GIB = {125: 38400, 250: 19200, 500: 9600, 1000: 4800}
LUSTRE_METADATA_IOPS_SMALL = (1500, 3000, 6000)
LUSTRE_METADATA_IOPS_MAX = 192000
# The largest StorageCapacity CreateFileSystem accepts (docs/facts/storage.md#fsx-storage-capacity-api-maximum);
# the account's Lustre storage quota, which preflight cannot read offline, is far lower.
LUSTRE_MAX_CAPACITY_GIB = 2147483647
LUSTRE_MAX_REPOSITORIES = 8
# S3 bucket names (S3's naming rules; no two adjacent dots).
BUCKET_NAME = Pattern(
    r"^(?!.*\.\.)[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$",
    "an S3 bucket name: 3-63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit",
)
BUCKET_NAME_RULE = BUCKET_NAME.regex
S3_PREFIX_RULE = re.compile(r"^[A-Za-z0-9!_.*'()=+,@ -][A-Za-z0-9!_.*'()=+,@ /-]*/$")
FILE_SYSTEM_PATH_RULE = re.compile(r"^/[A-Za-z0-9!_.*'()=+,@ /-]*$")


LUSTRE_METADATA_IOPS_STEP = 12000
LUSTRE_METADATA_IOPS_ALLOWED = "1500, 3000, 6000, 12000 or a multiple of 12000 up to 192000"
LUSTRE_DEPLOYMENT_TYPES = ("PERSISTENT_2", "SCRATCH_2")
LUSTRE_COMPRESSION_TYPES = ("LZ4", "NONE")
LUSTRE_METADATA_MODES = ("AUTOMATIC", "USER_PROVISIONED")
LUSTRE_REPOSITORY_EVENTS = ("NEW", "CHANGED", "DELETED")
# Where fminfra's node scripts mount the file system (scripts/lifecycle/on_create.sh's mount_fsx on
# HyperPod, the ec2 node bootstrap) and where the acceptance jobs look for it.
FSX_MOUNT = "/fsx"


def lustre_capacity_valid(gib: int) -> bool:
    """1200, 2400 or a multiple of 2400 GiB (SSD SCRATCH_2 and PERSISTENT_2)."""
    return gib in (1200, 2400) or (gib > 0 and gib % 2400 == 0)


def lustre_capacity_problem(gib: int) -> str | None:
    return None if lustre_capacity_valid(gib) else f"must be 1200, 2400 or a multiple of 2400 GiB, got {gib}"


def lustre_efa_capacity_problem(gib: int, mb_per_tib: int) -> str | None:
    """A capacity off the EFA step of its tier, which FSx refuses for an EFA-enabled file system."""
    step = LUSTRE_EFA_CAPACITY_STEP_GIB[mb_per_tib]
    if gib > 0 and gib % step == 0:
        return None
    return (
        f"must be a multiple of {step} GiB for an EFA-enabled file system at {mb_per_tib} MB/s/TiB "
        f"(steps by tier: {', '.join(f'{t}: {s}' for t, s in LUSTRE_EFA_CAPACITY_STEP_GIB.items())}), got {gib}"
    )


# What AUTOMATIC mode provisions for an SSD file system, by storage capacity (GiB, upper bound of each
# step -> metadata IOPS); from 48000 GiB on, 12000 IOPS per 24000 GiB. USER_PROVISIONED may not be fewer
# (docs/facts/storage.md#fsx-lustre-metadata-automatic-iops).
LUSTRE_AUTOMATIC_METADATA_IOPS = ((1200, 1500), (2400, 3000), (9600, 6000), (45600, 12000))
LUSTRE_AUTOMATIC_METADATA_IOPS_PER_24000_GIB = 12000


def lustre_automatic_metadata_iops(capacity_gib: int) -> int:
    """The metadata IOPS AUTOMATIC mode provisions for a capacity (1200, 2400 or a multiple of 2400 GiB);
    above 45600 GiB, 12000 per whole 24000 GiB (the lower multiple, so no value AWS takes is refused)."""
    for upper, iops in LUSTRE_AUTOMATIC_METADATA_IOPS:
        if capacity_gib <= upper:
            return iops
    return LUSTRE_AUTOMATIC_METADATA_IOPS_PER_24000_GIB * (capacity_gib // 24000)


def lustre_metadata_below_automatic_problem(iops: int, capacity_gib: int) -> str | None:
    """USER_PROVISIONED metadata IOPS below what AUTOMATIC would provision, which FSx refuses."""
    automatic = lustre_automatic_metadata_iops(capacity_gib)
    if iops >= automatic:
        return None
    return (
        f"must be at least {automatic} for {capacity_gib} GiB: FSx does not provision fewer metadata IOPS than mode automatic "
        f"does for the capacity, got {iops}; give {automatic} or more, or mode automatic"
    )


def lustre_metadata_iops_problem(iops: int) -> str | None:
    """USER_PROVISIONED metadata IOPS (docs/facts/storage.md#fsx-lustre-metadata-iops)."""
    if iops in LUSTRE_METADATA_IOPS_SMALL or (0 < iops <= LUSTRE_METADATA_IOPS_MAX and iops % LUSTRE_METADATA_IOPS_STEP == 0):
        return None
    return f"must be {LUSTRE_METADATA_IOPS_ALLOWED}, got {iops}"
