"""Every pinned EKS add-on build (EKS_ADDON_* in scripts/node/versions.env) is cited and recorded.

The line above each key cites its facts entry; the entry states `KEY=VALUE` exactly as pinned, the
Kubernetes version it was pinned for (the one in its key, EKS_ADDON_<NAME>_<major>_<minor>_VERSION), a source, and whether the build was
verified (`2026-11-30, verified`) or not (`..., unverified: <what was tried>`). A bump of a build or
therefore fails here until the facts are re-checked. The add-ons fminfra installs (`ADDONS`,
`HYPERPOD_ADDONS`) are pinned for every version the cluster kind may take, and nothing else is.
"""

from __future__ import annotations

import re

import pytest

from fminfra.compute.config import hyperpod_kubernetes_versions, supported_kubernetes_versions
from fminfra.compute.stack.clusters import ADDONS, FSX_CSI_ADDONS, HYPERPOD_ADDONS
from fminfra.core.resources import versions_manifest
from fminfra.hyperpod.constructs.task_governance import ADDON_VERSION_KEY as TASK_GOVERNANCE_VERSION_KEY
from tests.app.test_facts import all_entries

ADDON_KEY = re.compile(r"^(EKS_ADDON_[A-Z0-9_]+_VERSION)=(.*)$")
CITATION_LINE = re.compile(r"^# docs/facts/([a-z0-9-]+\.md)#([a-z0-9-]+)$")
CHECKED = re.compile(r"^- \*\*Checked:\*\* \d{4}-\d{2}-\d{2}, (verified\b|unverified: \S)", re.MULTILINE)
SOURCE = re.compile(r"^- \*\*Source:\*\* (.+)$", re.MULTILINE)
VERIFIED = re.compile(r"^- \*\*Checked:\*\* \d{4}-\d{2}-\d{2}, verified\b", re.MULTILINE)
# AWS's documentation hosts: the global one and the AWS-run China-region one (docs/facts/eks.md
# cites language copies on both). A build is "verified" only when one of them lists it.
AWS_DOCS = re.compile(r"https://docs\.(?:aws\.amazon\.com|amazonaws\.cn)/")


def addon_pins(manifest_text: str) -> dict[str, tuple[str, tuple[str, str] | None]]:
    """EKS_ADDON_* key -> (value, the (page, anchor) cited on the line just above it, or None)."""
    pins: dict[str, tuple[str, tuple[str, str] | None]] = {}
    previous = ""
    for line in manifest_text.splitlines():
        match = ADDON_KEY.match(line)
        if match:
            cited = CITATION_LINE.match(previous)
            pins[match.group(1)] = (match.group(2), (cited.group(1), cited.group(2)) if cited else None)
        previous = line
    return pins


KEY_VERSION = re.compile(r"_([0-9]+)_([0-9]+)_VERSION$")


def addon_fact_problems(manifest_text: str, facts: dict[tuple[str, str], str]) -> list[str]:
    """One line per pinned add-on whose citation or facts entry is missing or incomplete."""
    problems = []
    for key, (value, cited) in sorted(addon_pins(manifest_text).items()):
        in_key = KEY_VERSION.search(key)
        if in_key is None:
            problems.append(f"{key}: must name its Kubernetes version, EKS_ADDON_<NAME>_<major>_<minor>_VERSION")
            continue
        kubernetes_version = f"{in_key.group(1)}.{in_key.group(2)}"
        if cited is None:
            problems.append(f"{key}: the line above it must cite its facts entry (# docs/facts/<topic>.md#<anchor>)")
            continue
        entry = facts.get(cited)
        where = f"docs/facts/{cited[0]}#{cited[1]}"
        if entry is None:
            problems.append(f"{key}: {where} does not exist")
            continue
        if f"`{key}={value}`" not in entry:
            problems.append(f"{key}: {where} does not state `{key}={value}`")
        if f"Kubernetes {kubernetes_version}" not in entry:
            problems.append(f"{key}: {where} does not say it was pinned for Kubernetes {kubernetes_version}")
        source = SOURCE.search(entry)
        if source is None or not source.group(1).strip():
            problems.append(f"{key}: {where} has no source")
        if not CHECKED.search(entry):
            problems.append(f"{key}: {where} is marked neither verified nor unverified with what was tried")
        elif VERIFIED.search(entry) and not (source and AWS_DOCS.search(source.group(1))):
            problems.append(f"{key}: {where} is marked verified but its source names no AWS documentation page")
    return problems


MANIFEST_TEXT = versions_manifest().read_text(encoding="utf-8")


def test_every_addon_pin_is_cited_and_recorded() -> None:
    assert addon_pins(MANIFEST_TEXT), "no EKS_ADDON_* keys found in versions.env"
    assert addon_fact_problems(MANIFEST_TEXT, all_entries()) == []


def test_installed_addons_are_exactly_the_pinned_ones() -> None:
    """Every EKS version pins the add-ons of every cluster; HyperPod's versions also HyperPod's."""

    def keys(names: list[str], versions: tuple[str, ...]) -> set[str]:
        return {f"EKS_ADDON_{n}_{v.replace('.', '_')}_VERSION" for n in names for v in versions}

    hyperpod = [*HYPERPOD_ADDONS.values(), TASK_GOVERNANCE_VERSION_KEY]
    every = [*ADDONS.values(), *FSX_CSI_ADDONS.values()]  # the FSx CSI driver: on any cluster with storage.lustre
    expected = keys(every, supported_kubernetes_versions()) | keys(hyperpod, hyperpod_kubernetes_versions())
    assert expected == set(addon_pins(MANIFEST_TEXT))
    assert "1.35" in supported_kubernetes_versions() and "1.35" not in hyperpod_kubernetes_versions()


def _without_entry(facts: dict[tuple[str, str], str], anchor: str) -> dict[tuple[str, str], str]:
    return {k: v for k, v in facts.items() if k[1] != anchor}


def _with_line(facts: dict[tuple[str, str], str], anchor: str, field: str, line: str) -> dict[tuple[str, str], str]:
    """The facts with the `- **<field>:**` line of one entry replaced by `line`."""
    pattern = rf"(?m)^- \*\*{field}:\*\* .*$"
    return {k: re.sub(pattern, line, v) if k[1] == anchor else v for k, v in facts.items()}


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        # The facts entry deleted.
        (
            lambda text, facts: (text, _without_entry(facts, "eks-addon-cert-manager")),
            "EKS_ADDON_CERT_MANAGER_1_34_VERSION: docs/facts/eks.md#eks-addon-cert-manager does not exist",
        ),
        # The citation line deleted.
        (
            lambda text, facts: (text.replace("# docs/facts/eks.md#eks-addon-coredns\n", ""), facts),
            "EKS_ADDON_COREDNS_1_34_VERSION: the line above it must cite its facts entry",
        ),
        # A build bumped without re-checking its facts (v1.22.4-eksbuild.3: seen only in third-party files).
        (
            lambda text, facts: (
                re.sub(r"(?m)^EKS_ADDON_VPC_CNI_1_34_VERSION=.*$", "EKS_ADDON_VPC_CNI_1_34_VERSION=v1.22.4-eksbuild.3", text),
                facts,
            ),
            "EKS_ADDON_VPC_CNI_1_34_VERSION: docs/facts/eks.md#eks-addon-vpc-cni does not state `EKS_ADDON_VPC_CNI_1_34_VERSION=v1.22.4-eksbuild.3`",
        ),
        # A wrong build, a prefix of the pinned one (v1.13.2-eksbuild.1 against v1.13.2-eksbuild.11).
        (
            lambda text, facts: (
                re.sub(r"(?m)^EKS_ADDON_COREDNS_1_34_VERSION=.*$", "EKS_ADDON_COREDNS_1_34_VERSION=v1.13.2-eksbuild.1", text),
                facts,
            ),
            "EKS_ADDON_COREDNS_1_34_VERSION: docs/facts/eks.md#eks-addon-coredns does not state `EKS_ADDON_COREDNS_1_34_VERSION=v1.13.2-eksbuild.1`",
        ),
        # An entry marked verified whose source is a third-party file.
        (
            lambda text, facts: (
                text,
                _with_line(facts, "eks-addon-kube-proxy", "Source", "- **Source:** a public Terraform configuration"),
            ),
            "EKS_ADDON_KUBE_PROXY_1_34_VERSION: docs/facts/eks.md#eks-addon-kube-proxy is marked verified but its source names no AWS",
        ),
        # A new add-on pinned without any facts entry.
        (
            lambda text, facts: (text + "EKS_ADDON_EXAMPLE_1_34_VERSION=v1.0.0-eksbuild.1\n", facts),
            "EKS_ADDON_EXAMPLE_1_34_VERSION: the line above it must cite its facts entry",
        ),
        # A key without its Kubernetes version.
        (
            lambda text, facts: (text + "# docs/facts/eks.md#eks-addon-coredns\nEKS_ADDON_EXAMPLE_VERSION=v1.0.0-eksbuild.1\n", facts),
            "EKS_ADDON_EXAMPLE_VERSION: must name its Kubernetes version",
        ),
        # An entry that does not name the version of its key (the 1.35 build cited to the 1.34 entry).
        (
            lambda text, facts: (
                text.replace("# docs/facts/eks.md#eks-addon-kube-proxy-1-35\n", "# docs/facts/eks.md#eks-addon-kube-proxy\n"),
                facts,
            ),
            "EKS_ADDON_KUBE_PROXY_1_35_VERSION: docs/facts/eks.md#eks-addon-kube-proxy does not state",
        ),
        # An entry whose Checked line says neither verified nor what was tried.
        (
            lambda text, facts: (
                text,
                _with_line(facts, "eks-addon-kube-proxy", "Checked", "- **Checked:** 2026-11-30, unverified:"),
            ),
            "EKS_ADDON_KUBE_PROXY_1_34_VERSION: docs/facts/eks.md#eks-addon-kube-proxy is marked neither verified nor unverified",
        ),
    ],
)
def test_the_check_fails_on_broken_input(mutate, expected: str) -> None:  # type: ignore[no-untyped-def]
    text, facts = mutate(MANIFEST_TEXT, all_entries())
    assert any(p.startswith(expected) for p in addon_fact_problems(text, facts))


def test_a_build_moved_to_another_kubernetes_version_needs_its_entry_rechecked() -> None:
    """The 1.34 builds renamed to 1.36 keys: every entry names 1.34, so each fails."""
    text = "\n".join(line.replace("_1_34_VERSION=", "_1_36_VERSION=") for line in MANIFEST_TEXT.splitlines())
    moved = [k for k in addon_pins(text) if k.endswith("_1_36_VERSION")]
    problems = addon_fact_problems(text, all_entries())
    assert moved and all(any(p.startswith(f"{k}: ") and "pinned for Kubernetes 1.36" in p for p in problems) for k in moved)
