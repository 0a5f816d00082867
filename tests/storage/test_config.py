"""The storage section of the config, its exact messages, sizing and warnings (no synth)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from fminfra.cli.main import main
from fminfra.config import (
    format_warnings,
    lustre_capacity_for_throughput,
    lustre_capacity_valid,
    lustre_throughput_gb_per_s,
    parse_config,
)
from fminfra.core.errors import ConfigError
from fminfra.ops.plan import render_plan
from fminfra.storage.rules import lustre_automatic_metadata_iops, lustre_metadata_below_automatic_problem
from tests.conftest import ROOT

PROD = yaml.safe_load((ROOT / "config" / "prod.yaml").read_text())
DEV = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())


@pytest.mark.parametrize(
    ("capacity_gib", "iops"),
    [(1200, 1500), (2400, 3000), (4800, 6000), (9600, 6000), (12000, 12000), (45600, 12000), (48000, 24000), (72000, 36000)],
)
def test_automatic_metadata_iops_per_capacity(capacity_gib: int, iops: int) -> None:
    # AWS's table (docs/facts/storage.md#fsx-lustre-metadata-automatic-iops); user_provisioned at that figure passes.
    assert lustre_automatic_metadata_iops(capacity_gib) == iops
    assert lustre_metadata_below_automatic_problem(iops, capacity_gib) is None
    assert lustre_metadata_below_automatic_problem(iops - 1, capacity_gib) is not None


def _lustre(base: dict[str, Any] = PROD, **changes: Any) -> dict[str, Any]:
    """A copy of base with storage.lustre fields changed; a value of ... deletes the field."""
    data = copy.deepcopy(base)
    lustre = data["storage"]["lustre"]
    for key, value in changes.items():
        if value is ...:
            lustre.pop(key, None)
        else:
            lustre[key] = value
    return data


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "f.yaml")
    return info.value.problems


REPO = {"s3_prefix": "a/", "file_system_path": "/a"}
CAPACITY_ONLY = {"target_throughput_gb_per_s": ..., "storage_capacity_gib": 4800}

BAD = [
    # The acceptance list, one line each naming storage....
    (
        "capacity 3000",
        _lustre(**CAPACITY_ONLY | {"storage_capacity_gib": 3000}),
        "f.yaml: storage.lustre.storage_capacity_gib: must be 1200, 2400 or a multiple of 2400 GiB, got 3000",
    ),
    (
        "throughput 300",
        _lustre(throughput_mb_per_tib=300),
        "f.yaml: storage.lustre.throughput_mb_per_tib: must be 125, 250, 500 or 1000 (MB/s per TiB, persistent_2), got 300",
    ),
    (
        "efa with scratch_2",
        _lustre(DEV, efa=True),
        "f.yaml: storage.lustre.efa: only with deployment_type persistent_2; scratch_2 takes only storage_capacity_gib, compression and repositories",
    ),
    (
        "throughput with scratch_2",
        _lustre(DEV, throughput_mb_per_tib=250),
        "f.yaml: storage.lustre.throughput_mb_per_tib: only with deployment_type persistent_2; scratch_2 takes only storage_capacity_gib, compression and repositories",
    ),
    (
        "overlapping paths",
        _lustre(repositories=[{"s3_prefix": "a/", "file_system_path": "/data"}, {"s3_prefix": "b/", "file_system_path": "/data/sub"}]),
        "f.yaml: storage.lustre.repositories[1].file_system_path: '/data/sub' overlaps repositories[0].file_system_path '/data'; file_system_path of repositories must not overlap",
    ),
    (
        "nine repositories",
        _lustre(repositories=[{"s3_prefix": f"p{i}/", "file_system_path": f"/p{i}"} for i in range(9)]),
        "f.yaml: storage.lustre.repositories: at most 8 data repository associations per file system, got 9",
    ),
    (
        "capacity and target",
        _lustre(storage_capacity_gib=4800),
        "f.yaml: storage.lustre.target_throughput_gb_per_s: storage_capacity_gib and target_throughput_gb_per_s exclude each other; give one",
    ),
    (
        "backups with repositories",
        _lustre(backup_retention_days=7),
        "f.yaml: storage.lustre.backup_retention_days: must be 0 when repositories are set: FSx backs up only file systems not linked to S3 (the versioned bucket holds the durable copy)",
    ),
    # The other rules: docs/facts/storage.md#fsx-lustre-persistent2-throughput-tiers, #fsx-lustre-efa-requirements, #fsx-lustre-metadata-iops, #fsx-dra-limits.
    (
        "neither capacity nor target",
        _lustre(target_throughput_gb_per_s=...),
        "f.yaml: storage.lustre.storage_capacity_gib: give storage_capacity_gib (1200, 2400 or a multiple of 2400) or target_throughput_gb_per_s",
    ),
    (
        "target with scratch_2",
        _lustre(DEV, storage_capacity_gib=..., target_throughput_gb_per_s=1),
        "f.yaml: storage.lustre.target_throughput_gb_per_s: only with deployment_type persistent_2; scratch_2 takes only storage_capacity_gib, compression and repositories",
    ),
    (
        "metadata with scratch_2",
        _lustre(DEV, metadata={"mode": "automatic"}),
        "f.yaml: storage.lustre.metadata: only with deployment_type persistent_2; scratch_2 takes only storage_capacity_gib, compression and repositories",
    ),
    (
        "backups with scratch_2",
        _lustre(DEV, repositories=[], backup_retention_days=3),
        "f.yaml: storage.lustre.backup_retention_days: only with deployment_type persistent_2; scratch_2 takes only storage_capacity_gib, compression and repositories",
    ),
    (
        "target 0",
        _lustre(target_throughput_gb_per_s=0),
        "f.yaml: storage.lustre.target_throughput_gb_per_s: must be greater than 0 GB/s, got 0.0",
    ),
    (
        "metadata iops 5000",
        _lustre(metadata={"mode": "user_provisioned", "iops": 5000}),
        "f.yaml: storage.lustre.metadata.iops: must be 1500, 3000, 6000, 12000 or a multiple of 12000 up to 192000, got 5000",
    ),
    (
        "metadata iops 204000",
        _lustre(metadata={"mode": "user_provisioned", "iops": 204000}),
        "f.yaml: storage.lustre.metadata.iops: must be 1500, 3000, 6000, 12000 or a multiple of 12000 up to 192000, got 204000",
    ),
    (
        # prod's 43200 GiB: AUTOMATIC provisions 12000 (docs/facts/storage.md#fsx-lustre-metadata-automatic-iops)
        "metadata iops below automatic",
        _lustre(metadata={"mode": "user_provisioned", "iops": 6000}),
        "f.yaml: storage.lustre.metadata.iops: must be at least 12000 for 43200 GiB: FSx does not provision fewer metadata IOPS "
        "than mode automatic does for the capacity, got 6000; give 12000 or more, or mode automatic",
    ),
    (
        "metadata iops below automatic, large",
        _lustre(metadata={"mode": "user_provisioned", "iops": 24000}, target_throughput_gb_per_s=..., storage_capacity_gib=96000),
        "f.yaml: storage.lustre.metadata.iops: must be at least 48000 for 96000 GiB: FSx does not provision fewer metadata IOPS "
        "than mode automatic does for the capacity, got 24000; give 48000 or more, or mode automatic",
    ),
    (
        "metadata iops missing",
        _lustre(metadata={"mode": "user_provisioned"}),
        "f.yaml: storage.lustre.metadata.iops: required with mode user_provisioned: 1500, 3000, 6000, 12000 or a multiple of 12000 up to 192000",
    ),
    (
        "metadata iops with automatic",
        _lustre(metadata={"mode": "automatic", "iops": 12000}),
        "f.yaml: storage.lustre.metadata.iops: only with mode user_provisioned; mode automatic sizes metadata IOPS from the capacity",
    ),
    (
        "deployment type scratch_1",
        _lustre(deployment_type="scratch_1"),
        "f.yaml: storage.lustre.deployment_type: Input should be 'persistent_2' or 'scratch_2', got 'scratch_1'",
    ),
    ("compression zstd", _lustre(compression="zstd"), "f.yaml: storage.lustre.compression: Input should be 'lz4' or 'none', got 'zstd'"),
    (
        "path without leading slash",
        _lustre(repositories=[{"s3_prefix": "a/", "file_system_path": "data"}]),
        "f.yaml: storage.lustre.repositories[0].file_system_path: must be an absolute path starting with '/', e.g. /datasets, got 'data'",
    ),
    (
        "s3 prefix with s3://",
        _lustre(repositories=[{"s3_prefix": "s3://b/a/", "file_system_path": "/a"}]),
        "f.yaml: storage.lustre.repositories[0].s3_prefix: must be a prefix of the data bucket ending in '/' without a leading '/' or s3://, e.g. datasets/, got 's3://b/a/'",
    ),
    (
        "overlapping s3 prefixes",
        _lustre(repositories=[REPO, {"s3_prefix": "a/b/", "file_system_path": "/b"}]),
        "f.yaml: storage.lustre.repositories[1].s3_prefix: 'a/b/' overlaps repositories[0].s3_prefix 'a/'; s3_prefix of repositories must not overlap",
    ),
    (
        "event not allowed",
        _lustre(repositories=[REPO | {"export": ["new", "renamed"]}]),
        "f.yaml: storage.lustre.repositories[0].export[1]: Input should be 'new', 'changed' or 'deleted', got 'renamed'",
    ),
    (
        "event twice",
        _lustre(repositories=[REPO | {"import": ["new", "new"]}]),
        "f.yaml: storage.lustre.repositories[0].import: events must be unique, repeated: new",
    ),
    (
        "typo in lustre",
        _lustre(capacity_gib=1200),
        "f.yaml: storage.lustre.capacity_gib: unknown field (allowed here: deployment_type, storage_capacity_gib, target_throughput_gb_per_s, throughput_mb_per_tib, efa, compression, metadata, backup_retention_days, repositories)",
    ),
    (
        "existing bucket without name",
        {**PROD, "storage": {"bucket": {"existing": True}, "encryption": "s3"}},
        "f.yaml: storage.bucket.name: required with existing: true (the name of the bucket to use)",
    ),
    (
        "bad bucket name",
        {**PROD, "storage": {"bucket": {"name": "Bad_Bucket"}}},
        "f.yaml: storage.bucket.name: must be an S3 bucket name: 3-63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit, got 'Bad_Bucket'",
    ),
    (
        "kms key without a use",
        {**PROD, "storage": {"bucket": {"name": "team-data", "existing": True}, "encryption": "kms"}},
        "f.yaml: storage.encryption: kms creates a key for a created bucket or a persistent_2 file system; with an existing bucket "
        "and no persistent_2 file system it would encrypt nothing: use s3 (the existing bucket keeps its own encryption)",
    ),
    (
        "encryption",
        {**PROD, "storage": {"encryption": "sse-c"}},
        "f.yaml: storage.encryption: Input should be 'kms' or 's3', got 'sse-c'",
    ),
]


@pytest.mark.parametrize(("data", "expected"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_storage_gives_one_exact_line(data: dict[str, Any], expected: str) -> None:
    assert _problems(data) == [expected]


@pytest.mark.parametrize(
    ("gib", "valid"), [(1200, True), (2400, True), (4800, True), (43200, True), (0, False), (1800, False), (3000, False), (3600, False)]
)
def test_capacity_steps(gib: int, valid: bool) -> None:
    assert lustre_capacity_valid(gib) is valid


@pytest.mark.parametrize(
    ("target", "tier", "gib"),
    [
        (10, 1000, 12000),  # the acceptance case: 10 GB/s needs 10240 GiB; 12000 is the next valid size
        (0.1, 125, 1200),
        (0.3, 250, 2400),  # 1200 GiB at 250 is 0.293 GB/s, just short
        (40, 1000, 43200),
        (2.34375, 500, 4800),  # exactly reached
    ],
)
def test_target_throughput_derives_the_smallest_valid_capacity(target: float, tier: int, gib: int) -> None:
    assert lustre_capacity_for_throughput(target, tier) == gib
    assert lustre_throughput_gb_per_s(gib, tier) >= target
    smaller = [c for c in range(1200, gib, 1200) if lustre_capacity_valid(c)]
    assert all(lustre_throughput_gb_per_s(c, tier) < target for c in smaller)


def test_target_10_at_1000_in_config_and_plan() -> None:
    data = _lustre(target_throughput_gb_per_s=10, throughput_mb_per_tib=1000, efa=False)
    cfg = parse_config(data)
    assert cfg.storage and cfg.storage.lustre
    assert cfg.storage.lustre.capacity_gib == 12000
    assert round(cfg.storage.lustre.throughput_gb_per_s, 2) == 11.72
    lines = [line for line in render_plan(cfg).splitlines() if line.startswith("lustre:")]
    assert lines == [
        "lustre: persistent_2, 12000 GiB (smallest valid capacity for target 10 GB/s), 1000 MB/s/TiB, throughput 11.72 GB/s, "
        "0.092 GB/s per training GPU (128 GPUs), efa off, 2 repositories"
    ]


def test_defaults() -> None:
    cfg = parse_config(_lustre(**CAPACITY_ONLY | {"throughput_mb_per_tib": ..., "metadata": ..., "compression": ..., "efa": ...}))
    assert cfg.storage and cfg.storage.lustre
    lustre = cfg.storage.lustre
    assert (lustre.mb_per_tib, lustre.compression, lustre.efa, lustre.backup_retention_days) == (500, "lz4", False, 0)
    assert lustre.metadata is not None and lustre.metadata.mode == "automatic" and lustre.metadata.iops is None
    assert cfg.storage.encryption == "kms" and cfg.storage.bucket_name(cfg) == "fminfra-prod-data-333333333333-us-east-1"
    repo = parse_config(_lustre(repositories=[REPO])).storage.lustre.repositories[0]  # type: ignore[union-attr]
    assert (repo.import_events, repo.export_events) == (["new", "changed", "deleted"], [])
    scratch = parse_config(DEV).storage.lustre  # type: ignore[union-attr]
    assert scratch.metadata is None and scratch.mb_per_tib == 200


@pytest.mark.parametrize(
    ("tier", "gib", "step"),
    [(1000, 2400, 4800), (1000, 7200, 4800), (500, 4800, 9600), (250, 9600, 19200), (125, 19200, 38400)],
)
def test_an_efa_capacity_off_its_tiers_step_is_refused_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tier: int, gib: int, step: int
) -> None:
    # FSx refuses to create an EFA-enabled file system below or off its tier's step
    # (docs/facts/storage.md#fsx-lustre-efa-capacity-steps): validate says so, one line, exit 2.
    path = tmp_path / "efa.yaml"
    path.write_text(yaml.safe_dump(_lustre(**CAPACITY_ONLY | {"storage_capacity_gib": gib, "throughput_mb_per_tib": tier})))
    assert main(["validate", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"{path}: storage.lustre.storage_capacity_gib: must be a multiple of {step} GiB for an EFA-enabled file system "
        f"at {tier} MB/s/TiB (steps by tier: 125: 38400, 250: 19200, 500: 9600, 1000: 4800), got {gib}\n"
    )


def test_an_efa_capacity_on_its_tiers_step_or_without_efa_passes() -> None:
    for tier, step in ((125, 38400), (250, 19200), (500, 9600), (1000, 4800)):
        for gib in (step, 3 * step):
            fields = {"storage_capacity_gib": gib, "throughput_mb_per_tib": tier, "metadata": {"mode": "automatic"}}
            assert parse_config(_lustre(**CAPACITY_ONLY | fields)).warnings() == []
    assert parse_config(_lustre(**CAPACITY_ONLY | {"storage_capacity_gib": 7200, "efa": False})).warnings() == []
    # The shipped prod config: 43200 GiB derived at 1000 MB/s/TiB is 9 x 4800.
    prod = parse_config(PROD).storage
    assert prod is not None and prod.lustre is not None and prod.lustre.efa and prod.lustre.capacity_gib == 9 * 4800


def test_validate_rejects_bad_storage_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_lustre(**CAPACITY_ONLY | {"storage_capacity_gib": 3000})))
    assert main(["validate", str(path)]) == 2
    assert (
        capsys.readouterr().err == f"{path}: storage.lustre.storage_capacity_gib: must be 1200, 2400 or a multiple of 2400 GiB, got 3000\n"
    )


def test_plan_without_storage() -> None:
    data = copy.deepcopy(PROD)
    del data["storage"]
    assert "storage: none (no data bucket, no file system)" in render_plan(parse_config(data)).splitlines()


def test_a_capacity_derived_with_efa_lands_on_the_efa_step() -> None:
    """20 GB/s at 1000 MB/s/TiB with EFA derived 21,600 GiB, then warned that it was off the 4,800 GiB step."""
    data = _lustre(storage_capacity_gib=..., target_throughput_gb_per_s=20, throughput_mb_per_tib=1000, efa=True)
    cfg = parse_config(data, "f.yaml")
    assert cfg.storage is not None and cfg.storage.lustre is not None
    assert cfg.storage.lustre.capacity_gib == 24000
    assert cfg.storage.lustre.throughput_gb_per_s >= 20
    assert format_warnings("f.yaml", cfg) == []
    # Without EFA the smallest valid capacity stays (no step to land on).
    no_efa = parse_config(_lustre(storage_capacity_gib=..., target_throughput_gb_per_s=20, throughput_mb_per_tib=1000, efa=False))
    assert no_efa.storage is not None and no_efa.storage.lustre is not None
    assert no_efa.storage.lustre.capacity_gib == 21600


def test_fsx_capacity_has_the_services_upper_bound() -> None:
    """A throughput target that derives more than CreateFileSystem accepts is one line (the bound is botocore's)."""
    import botocore.session

    from fminfra.storage.rules import LUSTRE_MAX_CAPACITY_GIB

    shape = botocore.session.get_session().get_service_model("fsx").shape_for("StorageCapacity")
    assert shape.metadata["max"] == LUSTRE_MAX_CAPACITY_GIB
    problems = _problems(_lustre(storage_capacity_gib=..., target_throughput_gb_per_s=3_000_000, throughput_mb_per_tib=125, efa=False))
    assert len(problems) == 1
    assert problems[0].startswith("f.yaml: storage.lustre.target_throughput_gb_per_s: needs ")
    assert problems[0].endswith(
        f"GiB; FSx accepts at most {LUSTRE_MAX_CAPACITY_GIB} GiB per file system (CreateFileSystem's StorageCapacity), "
        "and the account's Lustre storage quota is lower: ask for less"
    )
