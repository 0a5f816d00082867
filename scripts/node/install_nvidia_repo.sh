#!/usr/bin/env bash
# NVIDIA's CUDA package repository, trusted through its signing key pinned by fingerprint in
# versions.env (NVIDIA_APT_KEY_FINGERPRINT / NVIDIA_RPM_KEY_FINGERPRINT). Every NVIDIA package
# (driver, Fabric Manager, NVLSM, CUDA, NCCL) is then verified by apt/dnf against that key.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

repo_files() {
    if [[ $PKG == apt ]]; then
        FINGERPRINT=$(ver NVIDIA_APT_KEY_FINGERPRINT)
        KEY_NAME=${FINGERPRINT: -8}
        KEY_NAME=${KEY_NAME,,}.pub
        KEYRING=/usr/share/keyrings/fminfra-cuda-archive-keyring.gpg
        REPO_FILE=/etc/apt/sources.list.d/fminfra-cuda.list
        REPO_CONTENT="deb [signed-by=$KEYRING] $NVIDIA_REPO_URL/ /"
    else
        FINGERPRINT=$(ver NVIDIA_RPM_KEY_FINGERPRINT)
        KEY_NAME=${FINGERPRINT: -8}.pub
        KEYRING=/etc/pki/rpm-gpg/fminfra-NVIDIA-${FINGERPRINT: -8}
        REPO_FILE=/etc/yum.repos.d/fminfra-cuda.repo
        REPO_CONTENT="[fminfra-cuda]
name=NVIDIA CUDA $REPO_DISTRO $REPO_ARCH (fminfra)
baseurl=$NVIDIA_REPO_URL
enabled=1
gpgcheck=1
gpgkey=file://$KEYRING"
    fi
}

check_repo() {
    CHECK_DETAIL="repository $NVIDIA_REPO_URL"
    [[ -s $FMINFRA_ROOT$KEYRING && -f $FMINFRA_ROOT$REPO_FILE ]] || return 1
    [[ $(<"$FMINFRA_ROOT$REPO_FILE") == "$REPO_CONTENT" ]] || return 1
    CHECK_DETAIL="repository $NVIDIA_REPO_URL, key $FINGERPRINT"
}

apply_repo() {
    install_repo_key "$NVIDIA_REPO_URL/$KEY_NAME" "$FINGERPRINT" "$FMINFRA_ROOT$KEYRING"
    write_file "$FMINFRA_ROOT$REPO_FILE" "$REPO_CONTENT"
    pkg_refresh
}

main() {
    node_script_init "$@"
    repo_files
    step nvidia-repo "NVIDIA CUDA repository $REPO_DISTRO/$REPO_ARCH, key $FINGERPRINT" check_repo apply_repo skip
    finish_steps
}

main "$@"
