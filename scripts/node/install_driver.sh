#!/usr/bin/env bash
# NVIDIA driver (only when no driver responds), Fabric Manager for NVSwitch types and the NVLink
# Subnet Manager for Blackwell HGX types, all from the NVIDIA repository at NVIDIA_DRIVER_BRANCH.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

check_driver() {
    local version
    # nvidia-smi prints its failures on stdout: accept only a version number.
    version=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null) || version=""
    version=$(head -n 1 <<<"$version")
    if [[ ! $version =~ ^[0-9]+\. ]]; then
        CHECK_DETAIL="no NVIDIA driver responds to nvidia-smi"
        return 1
    fi
    CHECK_DETAIL="driver $version loaded"
    [[ ${version%%.*} == "$BRANCH" ]] || return 3
}

apply_driver() {
    local kernel=${FMINFRA_KERNEL_RELEASE:-$(uname -r)}
    # The plan may be for another machine: name the kernel, not this one's release.
    [[ $DRY_RUN == 1 ]] && kernel="<uname -r>"
    if [[ $PKG == apt ]]; then
        pkg_install "linux-headers-$kernel" "nvidia-driver-$BRANCH-open"
    else
        pkg_install "kernel-devel-$kernel" kernel-modules-extra
        run retry dnf -y -q module install "nvidia-driver:$BRANCH-open"
    fi
    run modprobe nvidia
}

fabric_manager_package() {
    if [[ $PKG == apt ]]; then printf 'nvidia-fabricmanager-%s' "$BRANCH"; else printf 'nvidia-fabric-manager'; fi
}

check_fabric_manager() {
    local version
    version=$(pkg_version "$(fabric_manager_package)")
    CHECK_DETAIL="$(fabric_manager_package) ${version:-absent}"
    [[ -n $version ]] || return 1
    [[ ${version%%.*} == "$BRANCH" ]] || return 3
}

apply_fabric_manager() {
    pkg_install "$(fabric_manager_package)"
    run systemctl enable --now nvidia-fabricmanager.service
}

check_nvlsm() {
    local version
    version=$(pkg_version nvlsm)
    CHECK_DETAIL="nvlsm ${version:-absent}"
    [[ -n $version ]]
}

apply_nvlsm() {
    pkg_install nvlsm
}

main() {
    node_script_init "$@"
    BRANCH=$(ver NVIDIA_DRIVER_BRANCH)
    step nvidia-driver "NVIDIA driver branch $BRANCH (open kernel modules)" check_driver apply_driver
    if [[ $TYPE_NVSWITCH == yes ]]; then
        step fabric-manager "$(fabric_manager_package) at driver branch $BRANCH" check_fabric_manager apply_fabric_manager
    else
        not_needed fabric-manager
    fi
    if [[ $TYPE_NVLSM == yes ]]; then
        step nvlsm "NVLink Subnet Manager (nvlsm) for Blackwell HGX" check_nvlsm apply_nvlsm
    else
        not_needed nvlsm
    fi
    finish_steps
}

main "$@"
