"""The version manifest: the strict Python parser, its shape rules, and agreement with lib.sh's parser."""

from __future__ import annotations

import re
import subprocess
from datetime import date
from pathlib import Path

import pytest

from fminfra.compute.config import default_kubernetes_version
from fminfra.core.errors import ValidationError
from fminfra.core.resources import versions_manifest
from fminfra.core.versions import NODE_KEYS, load_versions, manifest_problems, parse_manifest, unpinned_commits, version

NODE = versions_manifest().parent


def test_shipped_manifest_is_complete_and_well_formed() -> None:
    versions = load_versions()
    assert manifest_problems(versions) == []
    assert set(NODE_KEYS) <= set(versions)


def test_verified_pins_are_the_published_ones() -> None:
    # AWS EC2 user guide (EFA installer signature) and NVIDIA's CUDA repository keys; see versions.env.
    assert version("EFA_INSTALLER_KEY_FINGERPRINT") == "4E9091BCBB97A96B26B15E59A05480B1DD2D3CCC"
    assert version("NVIDIA_APT_KEY_FINGERPRINT").endswith("3BF863CC")
    assert version("NVIDIA_RPM_KEY_FINGERPRINT").endswith("D42D0685")


def test_source_builds_are_pinned_to_the_tag_commits() -> None:
    # The commits of tags v2.5.2 (NVIDIA/gdrcopy) and v2.18.3 (NVIDIA/nccl-tests),
    # docs/facts/node-software.md#pin-gdrcopy-commit and #pin-nccl-tests-commit.
    assert unpinned_commits(load_versions()) == []
    assert version("GDRCOPY_VERSION") == "2.5.2" and version("GDRCOPY_COMMIT") == "c91ad9f178e5fb729fc5b6dc62a77c3bb364d6c9"
    assert version("NCCL_TESTS_VERSION") == "2.18.3" and version("NCCL_TESTS_COMMIT") == "f727aa2a540fef911de9d7bfd8852bc5d2c69815"


def test_nccl_package_cuda_is_a_published_build() -> None:
    # NCCL 2.30.4-1 is published for CUDA 13.2 and 12.9 only
    # (docs/facts/node-software.md#nccl-package-cuda-suffix); CUDA_VERSION (13.0) is not one of them.
    assert (version("NCCL_VERSION"), version("NCCL_PACKAGE_CUDA")) in {("2.30.4-1", "13.2"), ("2.30.4-1", "12.9")}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'NCCL_VERSION="2.30.4-1"',
            r"versions.env: line 1: expected KEY=VALUE \(no quotes, spaces or expansions\), got 'NCCL_VERSION=\"2.30.4-1\"'",
        ),
        ("NCCL_VERSION=$X", r"line 1: expected KEY=VALUE"),
        ("NCCL_VERSION = 2", r"line 1: expected KEY=VALUE"),
        ("export NCCL_VERSION=2", r"line 1: expected KEY=VALUE"),
        ("A=1\n# c\nA=2", r"versions.env: line 3: A is set twice"),
    ],
)
def test_parser_rejects(text: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        parse_manifest(text)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("EFA_INSTALLER_KEY_FINGERPRINT", "4e90", "EFA_INSTALLER_KEY_FINGERPRINT: must be 40 upper-case hex digits"),
        ("NCCL_TESTS_COMMIT", "v2.18.3", "NCCL_TESTS_COMMIT: must be empty or a 40-hex git commit, got 'v2.18.3'"),
        ("EFA_INSTALLER_SHA256", "abc", "EFA_INSTALLER_SHA256: must be empty or 64 lower-case hex digits"),
        ("NCCL_VERSION", "", "NCCL_VERSION: empty; only ACCEPT_PYTORCH_IMAGE_DIGEST, AWS_OFI_NCCL_SOURCE_COMMIT"),
        ("NCCL_PACKAGE_CUDA", "cuda13.2", "NCCL_PACKAGE_CUDA: must be a CUDA MAJOR.MINOR version such as 13.2, got 'cuda13.2'"),
        ("ACCEPT_PYTORCH_IMAGE_DIGEST", "25.06-py3", "ACCEPT_PYTORCH_IMAGE_DIGEST: must be empty or sha256: and 64 lower-case hex digits"),
        ("ACCEPT_PYTORCH_IMAGE_DIGEST", "sha256:" + "A" * 64, "ACCEPT_PYTORCH_IMAGE_DIGEST: must be empty or sha256:"),
        ("CHART_KARPENTER", "1.0.0", "CHART_KARPENTER: Helm chart and EKS add-on keys are CHART_<NAME>_VERSION"),
    ],
)
def test_shape_rules(key: str, value: str, message: str) -> None:
    versions = {**load_versions(), key: value}
    assert any(p.startswith(message) for p in manifest_problems(versions)), manifest_problems(versions)


def test_missing_key_is_named() -> None:
    versions = dict(load_versions())
    del versions["GDRCOPY_VERSION"]
    assert manifest_problems(versions) == ["GDRCOPY_VERSION: missing; every node script needs it"]


def test_version_of_an_empty_key_names_the_manifest() -> None:
    with pytest.raises(
        ValidationError, match=r"versions.env: AWS_OFI_NCCL_SOURCE_COMMIT: not set; known keys: .*AWS_OFI_NCCL_SOURCE_COMMIT"
    ):
        version("AWS_OFI_NCCL_SOURCE_COMMIT")


def _bash_manifest(path: Path) -> subprocess.CompletedProcess[str]:
    script = f'source {NODE}/lib.sh; load_manifest; for k in "${{!MANIFEST[@]}}"; do printf "%s=%s\\n" "$k" "${{MANIFEST[$k]}}"; done'
    return subprocess.run(
        ["bash", "-c", script], env={"PATH": "/usr/bin:/bin", "FMINFRA_VERSIONS": str(path)}, capture_output=True, text=True, check=False
    )


def test_bash_and_python_parsers_agree(tmp_path: Path) -> None:
    result = _bash_manifest(versions_manifest())
    assert result.returncode == 0, result.stderr
    assert dict(line.split("=", 1) for line in result.stdout.splitlines()) == load_versions()
    bad = tmp_path / "versions.env"
    bad.write_text("A=1\nB='2'\n")
    result = _bash_manifest(bad)
    assert result.returncode == 2
    assert "line 2: expected KEY=VALUE (no quotes, spaces or expansions), got 'B='2''" in result.stderr
    with pytest.raises(ValidationError, match="line 2: expected KEY=VALUE"):
        parse_manifest(bad.read_text())


# EKS add-on builds are named v<major>.<minor>.<patch>-eksbuild.<n> (the EKS User Guide's version
# tables: docs/facts/eks.md#eks-addon-coredns, #eks-addon-kube-proxy); kube-proxy's build carries the
# Kubernetes minor version it is for (v1.34.x for 1.34: #eks-addon-kube-proxy).
EKS_ADDON_BUILD = re.compile(r"^v[0-9]+\.[0-9]+\.[0-9]+-eksbuild\.[0-9]+$")


def eks_version_problems(versions: dict[str, str]) -> list[str]:
    """The EKS part of the manifest: each supported Kubernetes version has a standard-support end
    date and its own kube-proxy build (of its minor), HyperPod's versions are supported ones, and
    each add-on key holds an add-on build."""
    problems = []
    supported = [v for v in versions.get("EKS_SUPPORTED_KUBERNETES_VERSIONS", "").split(",") if v]
    if not supported:
        problems.append("EKS_SUPPORTED_KUBERNETES_VERSIONS: empty")
    for minor in supported:
        key = f"EKS_KUBERNETES_{minor.replace('.', '_')}_STANDARD_SUPPORT_END"
        try:
            date.fromisoformat(versions.get(key, ""))
        except ValueError:
            problems.append(f"{key}: must be the YYYY-MM-DD day EKS standard support of {minor} ends, got {versions.get(key)!r}")
        proxy = f"EKS_ADDON_KUBE_PROXY_{minor.replace('.', '_')}_VERSION"
        if not versions.get(proxy, "").startswith(f"v{minor}."):
            problems.append(f"{proxy}: must be a build for Kubernetes {minor} (v{minor}.x), got {versions.get(proxy)!r}")
    hyperpod = [v for v in versions.get("HYPERPOD_EKS_KUBERNETES_VERSIONS", "").split(",") if v]
    if not hyperpod or not set(hyperpod) <= set(supported):
        problems.append(f"HYPERPOD_EKS_KUBERNETES_VERSIONS: must be some of {', '.join(supported)}, got {hyperpod}")
    for key, value in sorted(versions.items()):
        if key.startswith("EKS_ADDON_") and not EKS_ADDON_BUILD.match(value):
            problems.append(f"{key}: must be an EKS add-on build such as v1.12.4-eksbuild.1, got {value!r}")
    return problems


def test_eks_part_of_the_manifest() -> None:
    versions = load_versions()
    assert eks_version_problems(versions) == []
    assert default_kubernetes_version(hyperpod=True) == "1.34"  # docs/facts/hyperpod.md#hyperpod-eks-kubernetes-versions
    assert default_kubernetes_version() == "1.35"  # docs/facts/eks.md#eks-kubernetes-version


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"EKS_SUPPORTED_KUBERNETES_VERSIONS": "1.34,1.35,1.36"}, "EKS_KUBERNETES_1_36_STANDARD_SUPPORT_END: must be the YYYY-MM-DD day"),
        ({"EKS_KUBERNETES_1_34_STANDARD_SUPPORT_END": "December 2, 2026"}, "EKS_KUBERNETES_1_34_STANDARD_SUPPORT_END: must be"),
        ({"EKS_ADDON_COREDNS_1_34_VERSION": "1.12.4"}, "EKS_ADDON_COREDNS_1_34_VERSION: must be an EKS add-on build"),
        (
            {"EKS_ADDON_KUBE_PROXY_1_34_VERSION": "v1.33.10-eksbuild.2"},
            "EKS_ADDON_KUBE_PROXY_1_34_VERSION: must be a build for Kubernetes 1.34",
        ),
        (
            {"EKS_ADDON_KUBE_PROXY_1_35_VERSION": "v1.34.6-eksbuild.13"},
            "EKS_ADDON_KUBE_PROXY_1_35_VERSION: must be a build for Kubernetes 1.35",
        ),
        ({"HYPERPOD_EKS_KUBERNETES_VERSIONS": "1.36"}, "HYPERPOD_EKS_KUBERNETES_VERSIONS: must be some of 1.34, 1.35"),
    ],
)
def test_eks_part_broken(change: dict[str, str], message: str) -> None:
    problems = eks_version_problems({**load_versions(), **change})
    assert any(p.startswith(message) for p in problems), problems
