"""The `storage` section: the data bucket and FSx for Lustre with its S3 repositories
(mirrors data/stack.py and storage/stack.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator, model_validator

from fminfra.core.config_base import Model, Problems, _raise_problems
from fminfra.core.findings import Finding, error
from fminfra.storage.rules import (
    BUCKET_NAME,
    FILE_SYSTEM_PATH_RULE,
    LUSTRE_DEFAULT_THROUGHPUT_MB_PER_TIB,
    LUSTRE_EFA_CAPACITY_STEP_GIB,
    LUSTRE_MAX_CAPACITY_GIB,
    LUSTRE_MAX_REPOSITORIES,
    LUSTRE_METADATA_IOPS_ALLOWED,
    LUSTRE_SCRATCH_2_BASELINE_MB_PER_TIB,
    LUSTRE_THROUGHPUT_TIERS_MB_PER_TIB,
    S3_PREFIX_RULE,
    lustre_capacity_problem,
    lustre_efa_capacity_problem,
    lustre_metadata_below_automatic_problem,
    lustre_metadata_iops_problem,
)

if TYPE_CHECKING:
    from fminfra.config.environment import EnvironmentConfig


def lustre_throughput_gb_per_s(capacity_gib: int, mb_per_tib: int) -> float:
    """Total throughput: capacity in TiB times the per-TiB tier, in GB/s (1 GB = 1000 MB)."""
    return capacity_gib / 1024 * mb_per_tib / 1000


def lustre_capacity_for_throughput(target_gb_per_s: float, mb_per_tib: int) -> int:
    """The smallest valid capacity (1200, 2400, then multiples of 2400 GiB) reaching the target."""
    for gib in (1200, 2400):
        if lustre_throughput_gb_per_s(gib, mb_per_tib) >= target_gb_per_s:
            return gib
    # Smallest multiple of 2400 with capacity_gib / 1024 * mb_per_tib >= target * 1000.
    needed_gib = target_gb_per_s * 1000 * 1024 / mb_per_tib
    gib = max(2400, -(-int(needed_gib) // 2400) * 2400)
    while lustre_throughput_gb_per_s(gib, mb_per_tib) < target_gb_per_s:
        gib += 2400
    return gib


RepositoryEvent = Literal["new", "changed", "deleted"]


def _all_events() -> list[RepositoryEvent]:
    return ["new", "changed", "deleted"]


def _events(value: list[str]) -> list[str]:
    repeated = sorted({e for e in value if value.count(e) > 1})
    if repeated:
        raise ValueError(f"events must be unique, repeated: {', '.join(repeated)}")
    return value


class RepositoryConfig(Model):
    """A data repository association between an S3 prefix of the data bucket and a file system path."""

    s3_prefix: str = Field(description="Prefix in the data bucket, ending in '/', e.g. datasets/.")
    file_system_path: str = Field(description="Directory in the file system, starting with '/', e.g. /datasets.")
    import_events: list[RepositoryEvent] = Field(
        default_factory=_all_events,
        alias="import",
        description="S3 changes imported automatically: new, changed, deleted (default all; [] for none).",
    )
    export_events: list[RepositoryEvent] = Field(
        default_factory=list,
        alias="export",
        description="File system changes exported automatically to S3: new, changed, deleted (default none).",
    )

    @field_validator("s3_prefix")
    @classmethod
    def _s3_prefix(cls, value: str) -> str:
        if not S3_PREFIX_RULE.match(value) or "//" in value:
            raise ValueError(
                f"must be a prefix of the data bucket ending in '/' without a leading '/' or s3://, e.g. datasets/, got {value!r}"
            )
        return value

    @field_validator("file_system_path")
    @classmethod
    def _file_system_path(cls, value: str) -> str:
        if not FILE_SYSTEM_PATH_RULE.match(value) or "//" in value or len(value) > 4096:
            raise ValueError(f"must be an absolute path starting with '/', e.g. /datasets, got {value!r}")
        return value

    @field_validator("import_events", "export_events")
    @classmethod
    def _unique_events(cls, value: list[str]) -> list[str]:
        return _events(value)


class MetadataConfig(Model):
    """Metadata performance of a PERSISTENT_2 file system."""

    mode: Literal["automatic", "user_provisioned"] = Field(default="automatic", description="automatic | user_provisioned.")
    iops: int | None = Field(default=None, description="user_provisioned only: 1500, 3000, 6000, 12000 or multiples of 12000 up to 192000.")

    @model_validator(mode="after")
    def _iops(self) -> MetadataConfig:
        if self.mode == "automatic" and self.iops is not None:
            raise Problems([error("iops", "only with mode user_provisioned; mode automatic sizes metadata IOPS from the capacity")])
        if self.mode == "user_provisioned":
            if self.iops is None:
                raise Problems([error("iops", f"required with mode user_provisioned: {LUSTRE_METADATA_IOPS_ALLOWED}")])
            if problem := lustre_metadata_iops_problem(self.iops):
                raise Problems([error("iops", problem)])
        return self


class LustreConfig(Model):
    """FSx for Lustre file system (Lustre 2.15) in the compute AZ's subnet.

    Size it by `storage_capacity_gib` or by `target_throughput_gb_per_s` (exclusive): total
    throughput = capacity in TiB x `throughput_mb_per_tib`.
    """

    deployment_type: Literal["persistent_2", "scratch_2"] = Field(
        default="persistent_2", description="persistent_2 (replicated, KMS, backups) | scratch_2 (cheap dev scratch)."
    )
    storage_capacity_gib: int | None = Field(default=None, description="1200, 2400 or a multiple of 2400 GiB.")
    target_throughput_gb_per_s: float | None = Field(
        default=None, allow_inf_nan=False, description="persistent_2: total GB/s wanted; derives the smallest valid capacity."
    )
    throughput_mb_per_tib: int | None = Field(default=None, description="persistent_2: 125, 250, 500 or 1000 (default 500).")
    efa: bool = Field(default=False, description="persistent_2: EFA-enabled file system (cannot be changed later).")
    compression: Literal["lz4", "none"] = Field(default="lz4", description="lz4 | none.")
    metadata: MetadataConfig | None = Field(default=None, description="persistent_2: metadata IOPS (default mode automatic).")
    backup_retention_days: int = Field(
        default=0, ge=0, le=90, description="persistent_2 without repositories: daily automatic backups kept (0: none)."
    )
    repositories: list[RepositoryConfig] = Field(default_factory=list, description="Data repository associations (at most 8).")

    @field_validator("throughput_mb_per_tib")
    @classmethod
    def _tier(cls, value: int | None) -> int | None:
        if value is not None and value not in LUSTRE_THROUGHPUT_TIERS_MB_PER_TIB:
            raise ValueError(f"must be 125, 250, 500 or 1000 (MB/s per TiB, persistent_2), got {value}")
        return value

    @model_validator(mode="after")
    def _rules(self) -> LustreConfig:
        problems: list[Finding] = []
        persistent = self.deployment_type == "persistent_2"
        if self.storage_capacity_gib is not None and self.target_throughput_gb_per_s is not None:
            problems.append(
                error("target_throughput_gb_per_s", "storage_capacity_gib and target_throughput_gb_per_s exclude each other; give one")
            )
        elif self.storage_capacity_gib is None and self.target_throughput_gb_per_s is None:
            problems.append(
                error("storage_capacity_gib", "give storage_capacity_gib (1200, 2400 or a multiple of 2400) or target_throughput_gb_per_s")
            )
        if self.storage_capacity_gib is not None and (problem := lustre_capacity_problem(self.storage_capacity_gib)):
            problems.append(error("storage_capacity_gib", problem))
        if (
            persistent
            and self.efa
            and not problems
            and self.storage_capacity_gib is not None
            and (problem := lustre_efa_capacity_problem(self.storage_capacity_gib, self.mb_per_tib))
        ):
            # FSx creates an EFA-enabled file system only on its tier's step (docs/facts/storage.md#fsx-lustre-efa-capacity-steps).
            problems.append(error("storage_capacity_gib", problem))
        if self.target_throughput_gb_per_s is not None and self.target_throughput_gb_per_s <= 0:
            problems.append(error("target_throughput_gb_per_s", f"must be greater than 0 GB/s, got {self.target_throughput_gb_per_s}"))
        elif not problems and self.capacity_gib > LUSTRE_MAX_CAPACITY_GIB:
            field = "storage_capacity_gib" if self.storage_capacity_gib is not None else "target_throughput_gb_per_s"
            problems.append(
                error(
                    field,
                    f"needs {self.capacity_gib} GiB; FSx accepts at most {LUSTRE_MAX_CAPACITY_GIB} GiB per file system "
                    "(CreateFileSystem's StorageCapacity), and the account's Lustre storage quota is lower: ask for less",
                )
            )
        if not persistent:
            # scratch_2 takes only capacity, compression and repositories.
            for field, given in (
                ("target_throughput_gb_per_s", self.target_throughput_gb_per_s is not None),
                ("throughput_mb_per_tib", self.throughput_mb_per_tib is not None),
                ("efa", self.efa),
                ("metadata", self.metadata is not None),
                ("backup_retention_days", self.backup_retention_days > 0),
            ):
                if given:
                    problems.append(
                        error(
                            field,
                            "only with deployment_type persistent_2; scratch_2 takes only storage_capacity_gib, compression and repositories",
                        )
                    )
        if persistent and self.backup_retention_days > 0 and self.repositories:
            problems.append(
                error(
                    "backup_retention_days",
                    "must be 0 when repositories are set: FSx backs up only file systems not linked to S3 (the versioned bucket holds the durable copy)",
                )
            )
        if len(self.repositories) > LUSTRE_MAX_REPOSITORIES:
            problems.append(
                error(
                    "repositories",
                    f"at most {LUSTRE_MAX_REPOSITORIES} data repository associations per file system, got {len(self.repositories)}",
                )
            )
        problems.extend(self._overlaps())
        metadata = self.metadata
        user_iops = metadata.iops if metadata is not None and metadata.mode == "user_provisioned" else None
        if (
            not problems
            and persistent
            and user_iops is not None
            and (problem := lustre_metadata_below_automatic_problem(user_iops, self.capacity_gib))
        ):
            problems.append(error("metadata.iops", problem))
        _raise_problems(problems)
        return self

    def _overlaps(self) -> list[Finding]:
        problems: list[Finding] = []
        for field, norm in (("file_system_path", lambda p: p.rstrip("/") + "/"), ("s3_prefix", lambda p: p)):
            for j, later in enumerate(self.repositories):
                for i in range(j):
                    a, b = norm(getattr(self.repositories[i], field)), norm(getattr(later, field))
                    if a.startswith(b) or b.startswith(a):
                        problems.append(
                            error(
                                f"repositories[{j}].{field}",
                                f"{getattr(later, field)!r} overlaps repositories[{i}].{field} {getattr(self.repositories[i], field)!r}; "
                                f"{field} of repositories must not overlap",
                            )
                        )
        return problems

    @property
    def persistent(self) -> bool:
        return self.deployment_type == "persistent_2"

    @property
    def mb_per_tib(self) -> int:
        """The per-TiB throughput: the tier (persistent_2) or the SCRATCH_2 baseline."""
        if not self.persistent:
            return LUSTRE_SCRATCH_2_BASELINE_MB_PER_TIB
        return self.throughput_mb_per_tib or LUSTRE_DEFAULT_THROUGHPUT_MB_PER_TIB

    @property
    def capacity_gib(self) -> int:
        """The capacity given, or the smallest valid one reaching target_throughput_gb_per_s (on the EFA step with efa)."""
        if self.storage_capacity_gib is not None:
            return self.storage_capacity_gib
        assert self.target_throughput_gb_per_s is not None  # the validator requires one of them
        gib = lustre_capacity_for_throughput(self.target_throughput_gb_per_s, self.mb_per_tib)
        if self.efa:
            # FSx creates and grows an EFA-enabled file system only in its tier's step: derive a
            # capacity on the step (docs/facts/storage.md#fsx-lustre-efa-capacity-steps).
            step = LUSTRE_EFA_CAPACITY_STEP_GIB[self.mb_per_tib]
            gib = -(-gib // step) * step
        return gib

    @property
    def throughput_gb_per_s(self) -> float:
        return lustre_throughput_gb_per_s(self.capacity_gib, self.mb_per_tib)

    def warnings(self) -> list[Finding]:
        """Problems that do not reject the config (relative paths, messages)."""
        return []


class BucketConfig(Model):
    """The data bucket: created by the Data stack, or an existing one."""

    name: str | None = Field(default=None, description="Bucket name; default fminfra-ENV-data-ACCOUNT-REGION. Required with existing.")
    existing: bool = Field(default=False, description="true: use the existing bucket `name` instead of creating one.")
    read_only_prefixes: list[str] = Field(
        default_factory=lambda: ["datasets/"],
        description="Prefixes GPU nodes may only read (e.g. datasets/); each ends in '/'. Default [datasets/].",
    )
    read_write_prefixes: list[str] = Field(
        default_factory=lambda: ["checkpoints/"],
        description="Prefixes GPU nodes may read, write and delete in (e.g. checkpoints/). Default [checkpoints/]. "
        "Nothing else in the bucket is reachable from the nodes.",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and (problem := BUCKET_NAME.problem(value)):
            raise ValueError(problem)
        return value

    @field_validator("read_only_prefixes", "read_write_prefixes")
    @classmethod
    def _prefixes(cls, value: list[str]) -> list[str]:
        bad = [(i, p) for i, p in enumerate(value) if not S3_PREFIX_RULE.match(p)]
        rule = "must be a prefix of the data bucket ending in '/' without a leading '/' or s3://, e.g. datasets/"
        _raise_problems([error(f"[{i}]", f"{rule}, got {p!r}") for i, p in bad])
        return value

    @model_validator(mode="after")
    def _prefixes_apart(self) -> BucketConfig:
        named = [("read_only_prefixes", i, p) for i, p in enumerate(self.read_only_prefixes)]
        named += [("read_write_prefixes", i, p) for i, p in enumerate(self.read_write_prefixes)]
        problems = [
            error(f"{field}[{i}]", f"{prefix!r} overlaps {other!r} ({other_field}[{j}]): give each part of the bucket one access level")
            for n, (field, i, prefix) in enumerate(named)
            for other_field, j, other in named[n + 1 :]
            if prefix.startswith(other) or other.startswith(prefix)
        ]
        _raise_problems(problems)
        return self

    @model_validator(mode="after")
    def _existing(self) -> BucketConfig:
        if self.existing and self.name is None:
            raise Problems([error("name", "required with existing: true (the name of the bucket to use)")])
        return self


class StorageConfig(Model):
    """The data bucket, the KMS key and the FSx for Lustre file system."""

    bucket: BucketConfig = Field(default_factory=BucketConfig)
    encryption: Literal["kms", "s3"] = Field(
        default="kms",
        description="kms: a rotating customer-managed key for the bucket and the persistent file system; s3: SSE-S3 and FSx's AWS-managed key.",
    )
    lustre: LustreConfig | None = Field(default=None, description="Omitted: no file system.")

    @model_validator(mode="after")
    def _key_has_a_use(self) -> StorageConfig:
        if self.encryption == "kms" and self.bucket.existing and not (self.lustre and self.lustre.persistent):
            raise Problems(
                [
                    error(
                        "encryption",
                        "kms creates a key for a created bucket or a persistent_2 file system; with an existing bucket "
                        "and no persistent_2 file system it would encrypt nothing: use s3 (the existing bucket keeps its own encryption)",
                    )
                ]
            )
        return self

    def bucket_name(self, cfg: EnvironmentConfig) -> str:
        """The bucket's name: given, or fminfra-ENV-data-ACCOUNT-REGION (bucket names are global)."""
        return self.bucket.name or cfg.physical_name("data", cfg.account, cfg.region)

    def warnings(self) -> list[Finding]:
        return [f.under("lustre") for f in (self.lustre.warnings() if self.lustre else [])]
