#!/usr/bin/env bash
# The EFA installer (libfabric, EFA kernel driver, rdma-core, Open MPI and the bundled
# aws-ofi-nccl), verified by its detached GPG signature against the AWS key pinned by
# fingerprint (and by sha256 when the manifest has one) before anything in it runs.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

EFA_BASE_URL=${FMINFRA_EFA_BASE_URL:-https://efa-installer.amazonaws.com}

check_efa() {
    local file=$FMINFRA_ROOT/opt/amazon/efa_installed_packages installed
    if [[ ! -f $file ]]; then
        CHECK_DETAIL="no EFA installer has run ($file absent)"
        return 1
    fi
    installed=$(sed -n 's/^#* *EFA installer version: *//p' "$file" | head -n 1)
    CHECK_DETAIL="EFA installer ${installed:-unknown version}"
    [[ $installed == "$EFA_VERSION" ]] || return 3
}

apply_efa() {
    local dir tarball
    dir=$(work_dir efa)
    tarball=aws-efa-installer-$EFA_VERSION.tar.gz
    download "$EFA_BASE_URL/$tarball" "$dir/$tarball"
    download "$EFA_BASE_URL/$tarball.sig" "$dir/$tarball.sig"
    download "$EFA_BASE_URL/aws-efa-installer.key" "$dir/aws-efa-installer.key"
    run verify_gpg_signature "$dir/$tarball" "$dir/$tarball.sig" "$dir/aws-efa-installer.key" "$(ver EFA_INSTALLER_KEY_FINGERPRINT)"
    run verify_sha256 "$dir/$tarball" "$(ver_optional EFA_INSTALLER_SHA256)"
    run tar -xzf "$dir/$tarball" -C "$dir"
    run env --chdir="$dir/aws-efa-installer" ./efa_installer.sh -y
}

main() {
    node_script_init "$@"
    EFA_VERSION=$(ver EFA_INSTALLER_VERSION)
    if ((TYPE_EFA == 0)); then
        not_needed efa
    else
        step efa "EFA installer $EFA_VERSION (signature key $(ver EFA_INSTALLER_KEY_FINGERPRINT))" check_efa apply_efa
    fi
    finish_steps
}

main "$@"
