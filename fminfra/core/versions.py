"""Strict reader of the pinned version manifest `scripts/node/versions.env`."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from fminfra.core.errors import ValidationError
from fminfra.core.resources import versions_manifest

_LINE = re.compile(r"^(?P<key>[A-Z][A-Z0-9_]*)=(?P<value>[A-Za-z0-9._:/+,@-]*)$")


def parse_manifest(text: str, source: str = "versions.env") -> dict[str, str]:
    """KEY=VALUE lines and comments only; anything else (quotes, spaces, `$`) is an error."""
    versions: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            raise ValidationError(f"{source}: line {number}: expected KEY=VALUE (no quotes, spaces or expansions), got {raw!r}")
        if match["key"] in versions:
            raise ValidationError(f"{source}: line {number}: {match['key']} is set twice")
        versions[match["key"]] = match["value"]
    return versions


@cache
def load_versions(path: Path | None = None) -> dict[str, str]:
    """The manifest as a dict (cached)."""
    manifest = path or versions_manifest()
    try:
        text = manifest.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValidationError(f"{manifest}: (file): no such file; the version manifest is missing") from None
    return parse_manifest(text, str(manifest))


def version(key: str) -> str:
    """One pinned version; ValidationError naming the manifest when the key is absent or empty."""
    versions = load_versions()
    value = versions.get(key)
    if not value:
        raise ValidationError(f"{versions_manifest()}: {key}: not set; known keys: {', '.join(sorted(versions))}")
    return value


# Keys every node script needs; the scripts read them through lib.sh's own strict parser.
NODE_KEYS: tuple[str, ...] = (
    "NVIDIA_DRIVER_BRANCH",
    "CUDA_VERSION",
    "NCCL_VERSION",
    "NCCL_PACKAGE_CUDA",
    "NVIDIA_APT_KEY_FINGERPRINT",
    "NVIDIA_RPM_KEY_FINGERPRINT",
    "EFA_INSTALLER_VERSION",
    "EFA_INSTALLER_KEY_FINGERPRINT",
    "EFA_INSTALLER_SHA256",
    "AWS_OFI_NCCL_VERSION",
    "AWS_OFI_NCCL_SOURCE_COMMIT",
    "GDRCOPY_VERSION",
    "GDRCOPY_COMMIT",
    "NCCL_TESTS_VERSION",
    "NCCL_TESTS_COMMIT",
    "DCGM_EXPORTER_VERSION",
    "NODE_EXPORTER_VERSION",
)
# Keys whose empty value has a meaning (the manifest's comments say which).
MAY_BE_EMPTY: frozenset[str] = frozenset(
    {"EFA_INSTALLER_SHA256", "AWS_OFI_NCCL_SOURCE_COMMIT", "GDRCOPY_COMMIT", "NCCL_TESTS_COMMIT", "ACCEPT_PYTORCH_IMAGE_DIGEST"}
)

_SHAPES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("_FINGERPRINT", re.compile(r"^[0-9A-F]{40}$"), "40 upper-case hex digits (an OpenPGP v4 fingerprint)"),
    ("_COMMIT", re.compile(r"^([0-9a-f]{40})?$"), "empty or a 40-hex git commit"),
    ("_SHA256", re.compile(r"^([0-9a-f]{64})?$"), "empty or 64 lower-case hex digits"),
    ("NCCL_PACKAGE_CUDA", re.compile(r"^[0-9]+\.[0-9]+$"), "a CUDA MAJOR.MINOR version such as 13.2"),
    ("_DIGEST", re.compile(r"^(sha256:[0-9a-f]{64})?$"), "empty or sha256: and 64 lower-case hex digits (an image digest)"),
)


def manifest_problems(versions: dict[str, str]) -> list[str]:
    """What is wrong with a parsed manifest, one `KEY: message` per problem (empty when fine)."""
    problems = [f"{key}: missing; every node script needs it" for key in NODE_KEYS if key not in versions]
    for key, value in versions.items():
        if not value and key not in MAY_BE_EMPTY:
            problems.append(f"{key}: empty; only {', '.join(sorted(MAY_BE_EMPTY))} may be empty")
        for suffix, shape, allowed in _SHAPES:
            if key.endswith(suffix) and not shape.match(value):
                problems.append(f"{key}: must be {allowed}, got {value!r}")
        if key.startswith(("CHART_", "EKS_ADDON_")) and not key.endswith("_VERSION"):
            problems.append(f"{key}: Helm chart and EKS add-on keys are CHART_<NAME>_VERSION / EKS_ADDON_<NAME>_VERSION")
    return problems


def unpinned_commits(versions: dict[str, str]) -> list[str]:
    """Source builds whose commit is not pinned yet (their scripts refuse to run without one)."""
    return sorted(k for k in ("GDRCOPY_COMMIT", "NCCL_TESTS_COMMIT") if not versions.get(k))
