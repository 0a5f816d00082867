"""The serving image's build folder (fminfra/serving/image/): the Dockerfile's build args against what
install_efa.sh reads and scripts/node/versions.env holds, a fact cited for every step, the inherited
`vllm serve` entrypoint; and install_efa.sh itself (bash -n, shellcheck), run against the fake node of
tests/fakes/node_fakes.py (fake curl, gpg, apt-get, dpkg-query and EFA installer on PATH): it verifies
the installer by the pinned key, refuses another key, a bad signature, a wrong sha256 and a missing or
malformed build arg, and runs the installer in container mode."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.fakes.node_fakes import MANIFEST, FakeNode, make_node, sign

IMAGE = ROOT / "fminfra" / "serving" / "image"
DOCKERFILE = IMAGE / "Dockerfile"
SCRIPT = IMAGE / "install_efa.sh"
CONTAINER_FLAGS = "-y --skip-kmod --skip-limit-conf --no-verify"  # docs/facts/serving-image.md#efa-installer-container-flags
REQUIRED_ARGS = ("EFA_INSTALLER_VERSION", "EFA_INSTALLER_KEY_FINGERPRINT", "AWS_OFI_NCCL_VERSION")


# --- the Dockerfile -----------------------------------------------------------------------------


def instructions(text: str) -> list[tuple[int, str, str]]:
    """(line index, INSTRUCTION, rest) of each instruction; the file has no continuation lines."""
    out = []
    for index, line in enumerate(text.splitlines()):
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            out.append((index, word.upper(), rest.strip()))
    return out


def build_args(text: str) -> dict[str, str | None]:
    """ARG name -> its default (None when it has none)."""
    args: dict[str, str | None] = {}
    for _, word, rest in instructions(text):
        if word == "ARG":
            name, eq, default = rest.partition("=")
            args[name] = default if eq else None
    return args


def manifest_keys_read(script: str) -> set[str]:
    """The keys of scripts/node/versions.env that the script names."""
    return {key for key in MANIFEST if re.search(rf"\b{re.escape(key)}\b", script)}


def arg_mismatch(dockerfile: str, script: str) -> list[str]:
    """What differs between the Dockerfile's build args (BASE_IMAGE aside) and the manifest keys the
    script reads; each arg must also be a manifest key."""
    args = set(build_args(dockerfile)) - {"BASE_IMAGE"}
    read = manifest_keys_read(script)
    problems = [f"ARG {name} is no key of scripts/node/versions.env" for name in sorted(args - set(MANIFEST))]
    problems += [f"install_efa.sh reads {name}, which the Dockerfile does not pass" for name in sorted(read - args)]
    problems += [f"ARG {name} is not read by install_efa.sh" for name in sorted((args & set(MANIFEST)) - read)]
    return problems


def uncited_steps(text: str) -> list[str]:
    """Each ARG, RUN and ENV whose paragraph (the lines above it up to a blank line) cites no fact."""
    lines = text.splitlines()
    out = []
    for index, word, rest in instructions(text):
        if word not in ("ARG", "RUN", "ENV"):
            continue
        start = index
        while start > 0 and lines[start - 1].strip():
            start -= 1
        if "docs/facts/" not in "\n".join(lines[start : index + 1]):
            out.append(f"{word} {rest}")
    return out


def test_base_image_is_an_arg_without_default_and_the_only_from() -> None:
    text = DOCKERFILE.read_text()
    steps = instructions(text)
    assert [(w, r) for _, w, r in steps[:2]] == [("ARG", "BASE_IMAGE"), ("FROM", "${BASE_IMAGE}")]
    assert [r for _, w, r in steps if w == "FROM"] == ["${BASE_IMAGE}"]


def test_build_args_are_what_install_efa_reads_and_all_in_the_manifest() -> None:
    text = DOCKERFILE.read_text()
    assert arg_mismatch(text, SCRIPT.read_text()) == []
    # No pinned value is written into the Dockerfile: every arg comes from the caller.
    assert all(default is None for default in build_args(text).values())


@pytest.mark.parametrize(
    ("dockerfile", "script", "expected"),
    [
        ("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nARG EFA_INSTALLER_VERSION\n", "$EFA_INSTALLER_VERSION $NCCL_VERSION", ["reads NCCL_VERSION"]),
        (
            "ARG BASE_IMAGE\nFROM x\nARG EFA_INSTALLER_VERSION\nARG EFA_INSTALLER_SHA256\n",
            "$EFA_INSTALLER_VERSION",
            ["ARG EFA_INSTALLER_SHA256 is not read"],
        ),
        ("ARG BASE_IMAGE\nFROM x\nARG EFA_VERSION\n", "", ["ARG EFA_VERSION is no key"]),
    ],
)
def test_an_arg_mismatch_is_found(dockerfile: str, script: str, expected: list[str]) -> None:
    """Test of the test: an arg the script reads but the Dockerfile lacks, an arg nobody reads, an arg the manifest lacks."""
    problems = arg_mismatch(dockerfile, script)
    assert len(problems) == len(expected)
    assert all(e in p for e, p in zip(expected, problems, strict=True))


def test_every_step_cites_a_fact() -> None:
    assert uncited_steps(DOCKERFILE.read_text()) == []


def test_an_uncited_step_is_found() -> None:
    text = "# docs/facts/serving-image.md#vllm-image-base-os\nARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n\n# why, without a source\nENV FI_PROVIDER=efa\n"
    assert uncited_steps(text) == ["ENV FI_PROVIDER=efa"]


def test_the_base_images_entrypoint_is_kept() -> None:
    """`vllm serve` comes from the base image (docs/facts/serving-image.md#vllm-image-entrypoint-inherited):
    an ENTRYPOINT here would replace it and a CMD would pass arguments to it."""
    assert [w for _, w, _ in instructions(DOCKERFILE.read_text()) if w in ("ENTRYPOINT", "CMD", "USER", "SHELL")] == []


def test_env_names_the_folders_install_efa_checks() -> None:
    text = DOCKERFILE.read_text()
    envs = dict(rest.partition("=")[::2] for _, word, rest in instructions(text) if word == "ENV")
    assert envs["NCCL_NET_PLUGIN"] == "ofi"  # docs/facts/serving-image.md#nccl-net-plugin-name
    # The base image's path comes first and stays intact when it is empty (no stray leading colon).
    base = "${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH}:}"
    assert envs["LD_LIBRARY_PATH"].startswith(base)
    folders = re.findall(r"(?m)^(?:LIBFABRIC|OFI_NCCL)_DIR=(\S+)$", SCRIPT.read_text())
    assert len(folders) == 2
    assert envs["LD_LIBRARY_PATH"].removeprefix(base).split(":") == folders
    assert not [name for name in envs if name.startswith("FI_")]  # docs/facts/serving-image.md#efa-container-env


# --- install_efa.sh: static checks --------------------------------------------------------------


def test_install_efa_parses_and_is_shellcheck_clean() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, check=False).returncode == 0
    shellcheck = Path(sys.executable).parent / "shellcheck"
    result = subprocess.run([str(shellcheck), str(SCRIPT)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert SCRIPT.read_text().startswith("#!/usr/bin/env bash\n")
    assert "set -o errexit -o nounset -o pipefail" in SCRIPT.read_text()
    assert SCRIPT.read_text().rstrip().endswith('main "$@"')
    assert not re.search(r"\beval\b", SCRIPT.read_text())


# --- install_efa.sh on a fake image -------------------------------------------------------------


@pytest.fixture
def image(tmp_path: Path) -> FakeNode:
    """An Ubuntu image with the fakes, the EFA installer tarball signed by the pinned key, its key and signature."""
    return make_node(tmp_path)


def run(image: FakeNode, **args: str | None) -> subprocess.CompletedProcess[str]:
    """install_efa.sh with the manifest's values as build args; an arg given as None is left unset."""
    values: dict[str, str | None] = {key: MANIFEST[key] for key in manifest_keys_read(SCRIPT.read_text())}
    values.update(args)
    env = {**image.env, **{k: v for k, v in values.items() if v is not None}}
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False)


def installer_calls(image: FakeNode) -> list[str]:
    return [c for c in image.calls() if c.startswith("efa_installer.sh")]


def test_verifies_by_the_pinned_key_then_installs_in_container_mode(image: FakeNode) -> None:
    result = run(image)
    assert result.returncode == 0, result.stderr
    fpr = MANIFEST["EFA_INSTALLER_KEY_FINGERPRINT"]
    assert f"good signature on aws-efa-installer-{MANIFEST['EFA_INSTALLER_VERSION']}.tar.gz by {fpr}" in result.stderr
    assert installer_calls(image) == [f"efa_installer.sh {CONTAINER_FLAGS}"]
    calls = image.calls()
    verify = next(i for i, c in enumerate(calls) if c.startswith("gpg") and "--verify" in c)
    assert verify < calls.index(installer_calls(image)[0])
    assert f"aws-ofi-nccl {MANIFEST['AWS_OFI_NCCL_VERSION']}-1 and libfabric installed" in result.stderr
    assert not any(" upgrade" in c for c in calls if c.startswith("apt-get"))


def test_a_key_with_another_fingerprint_is_refused(image: FakeNode) -> None:
    """Test of the test: the downloaded key (and a good signature by it) is not the pinned key."""
    other = "0" * 40
    (image.downloads / "aws-efa-installer.key").write_text(other + "\n")
    sign(image, good=True, fingerprint=other)
    result = run(image)
    assert result.returncode == 1
    assert f"has fingerprint '{other}', but EFA_INSTALLER_KEY_FINGERPRINT pins {MANIFEST['EFA_INSTALLER_KEY_FINGERPRINT']}" in result.stderr
    assert installer_calls(image) == []


def test_a_key_file_gpg_cannot_read_is_refused(image: FakeNode) -> None:
    """The fake gpg prints the key file's first line as its fingerprint; an empty file has none."""
    (image.downloads / "aws-efa-installer.key").write_text("")
    result = run(image)
    assert result.returncode == 1
    assert "has fingerprint 'none', but EFA_INSTALLER_KEY_FINGERPRINT pins" in result.stderr
    assert installer_calls(image) == []


def test_a_pin_of_another_fingerprint_refuses_the_real_key(image: FakeNode) -> None:
    result = run(image, EFA_INSTALLER_KEY_FINGERPRINT="A" * 40)
    assert result.returncode == 1
    assert f"but EFA_INSTALLER_KEY_FINGERPRINT pins {'A' * 40}; nothing was installed" in result.stderr
    assert installer_calls(image) == []


@pytest.mark.parametrize("by_other_key", [False, True])
def test_a_bad_signature_or_one_by_another_key_is_refused(image: FakeNode, by_other_key: bool) -> None:
    sign(image, good=by_other_key, fingerprint="B" * 40 if by_other_key else None)
    result = run(image)
    assert result.returncode == 1
    assert "verification failed: no good signature on aws-efa-installer-" in result.stderr
    assert installer_calls(image) == []


def test_a_pinned_sha256_is_checked(image: FakeNode) -> None:
    tarball = image.downloads / f"aws-efa-installer-{MANIFEST['EFA_INSTALLER_VERSION']}.tar.gz"
    good = hashlib.sha256(tarball.read_bytes()).hexdigest()
    result = run(image, EFA_INSTALLER_SHA256=good)
    assert result.returncode == 0, result.stderr
    assert "matches EFA_INSTALLER_SHA256" in result.stderr


def test_a_wrong_sha256_is_refused(image: FakeNode) -> None:
    result = run(image, EFA_INSTALLER_SHA256="0" * 64)
    assert result.returncode == 1
    assert f"but EFA_INSTALLER_SHA256 pins {'0' * 64}; nothing was installed" in result.stderr
    assert installer_calls(image) == []


@pytest.mark.parametrize("name", REQUIRED_ARGS)
@pytest.mark.parametrize("value", [None, ""])
def test_a_missing_build_arg_is_refused_naming_it(image: FakeNode, name: str, value: str | None) -> None:
    result = run(image, **{name: value})
    assert result.returncode == 2
    assert f"build arg {name} is missing: pass --build-arg {name}=" in result.stderr
    assert image.calls() == []


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("EFA_INSTALLER_VERSION", "latest", "expected a version such as"),
        ("EFA_INSTALLER_KEY_FINGERPRINT", "4E90 91BC", "expected 40 upper-case hex digits"),
        ("EFA_INSTALLER_KEY_FINGERPRINT", "ABCD", "has 4 digits, expected 40"),
        ("EFA_INSTALLER_SHA256", "xyz", "expected empty or 64 lower-case hex digits"),
        ("EFA_INSTALLER_SHA256", "ab" * 31, "has 62 digits, expected 64"),
    ],
)
def test_a_malformed_build_arg_is_refused(image: FakeNode, name: str, value: str, message: str) -> None:
    result = run(image, **{name: value})
    assert result.returncode == 2
    assert f"build arg {name} " in result.stderr and message in result.stderr
    assert image.calls() == []


def test_a_source_commit_is_refused_clearly(image: FakeNode) -> None:
    result = run(image, AWS_OFI_NCCL_SOURCE_COMMIT="c" * 40)
    assert result.returncode == 2
    assert "uses the aws-ofi-nccl the EFA installer bundles and builds none from source; leave it empty" in result.stderr
    assert installer_calls(image) == []


def test_a_bundled_plugin_other_than_the_pin_fails_the_build(image: FakeNode) -> None:
    result = run(image, AWS_OFI_NCCL_VERSION="9.9.9")
    assert result.returncode == 1
    assert "bundles aws-ofi-nccl " in result.stderr and "but AWS_OFI_NCCL_VERSION pins 9.9.9" in result.stderr


def test_a_base_image_without_apt_is_refused(tmp_path: Path) -> None:
    image = make_node(tmp_path, os_id="amzn", os_version="2023")
    result = run(image)
    assert result.returncode == 2
    assert "ID is 'amzn'; the serving image installs the EFA installer's Debian packages" in result.stderr
    assert installer_calls(image) == []


def _real_gpg_key(home: Path) -> str:
    """A fresh signing key in home; its fingerprint."""
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--quiet"]
    subprocess.run([*gpg, "--passphrase", "", "--quick-gen-key", "fminfra test <test@example.com>", "ed25519", "sign", "never"], check=True)
    listing = subprocess.run([*gpg, "--with-colons", "--list-keys"], capture_output=True, text=True, check=True).stdout
    return next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))


@pytest.mark.skipif(not Path("/usr/bin/gpg").exists(), reason="needs GnuPG at /usr/bin/gpg")
@pytest.mark.parametrize("tampered", [False, True])
def test_real_gpg_verifies_a_real_signature(image: FakeNode, tmp_path: Path, tampered: bool) -> None:
    """With GnuPG itself instead of the fake: a detached signature by the pinned key passes, and the
    same signature over a changed tarball is refused."""
    (image.base / "bin" / "gpg").unlink()
    home = tmp_path / "signer"
    fpr = _real_gpg_key(home)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--quiet", "--yes"]  # --yes: replace the fake key and signature
    tarball = image.downloads / f"aws-efa-installer-{MANIFEST['EFA_INSTALLER_VERSION']}.tar.gz"
    subprocess.run([*gpg, "--armor", "--output", str(image.downloads / "aws-efa-installer.key"), "--export", fpr], check=True)
    subprocess.run([*gpg, "--output", f"{tarball}.sig", "--detach-sign", str(tarball)], check=True)
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)  # the agent signing started
    if tampered:
        tarball.write_bytes(tarball.read_bytes() + b"\0" * 1024)
    result = run(image, EFA_INSTALLER_KEY_FINGERPRINT=fpr, EFA_INSTALLER_SHA256="")
    if tampered:
        assert result.returncode == 1
        assert f"no good signature on {tarball.name} by {fpr}" in result.stderr
        assert installer_calls(image) == []
    else:
        assert result.returncode == 0, result.stderr
        assert installer_calls(image) == [f"efa_installer.sh {CONTAINER_FLAGS}"]
