#!/usr/bin/env bash
# NCCL at NCCL_VERSION from the NVIDIA repository (held there), and the aws-ofi-nccl network
# plugin: the one bundled by the EFA installer, checked against AWS_OFI_NCCL_VERSION, or built
# from AWS_OFI_NCCL_SOURCE_COMMIT when the manifest sets one.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

nccl_packages() {
    local pinned=$NCCL_PKG_VERSION
    if [[ $PKG == apt ]]; then
        printf '%s\n' "libnccl2=$pinned" "libnccl-dev=$pinned"
    else
        printf '%s\n' "libnccl-$pinned" "libnccl-devel-$pinned"
    fi
}

check_nccl() {
    local name=libnccl2 version
    [[ $PKG == dnf ]] && name=libnccl
    version=$(pkg_version "$name")
    CHECK_DETAIL="$name ${version:-absent}"
    [[ -n $version ]] || return 1
    [[ $version == "$NCCL_PKG_VERSION" ]] || return 3
}

apply_nccl() {
    local -a packages
    mapfile -t packages < <(nccl_packages)
    pkg_install "${packages[@]}"
    if [[ $PKG == apt ]]; then
        run apt-mark hold libnccl2 libnccl-dev
    fi
}

check_ofi_bundled() {
    local version plugin=$FMINFRA_ROOT/opt/amazon/ofi-nccl/lib/$LIB_ARCH-linux-gnu/libnccl-net-ofi.so
    version=$(pkg_version libnccl-ofi)
    if [[ -n $version ]]; then
        CHECK_DETAIL="aws-ofi-nccl $version (EFA installer)"
        [[ $version == "$OFI_VERSION" || $version == "$OFI_VERSION"-* ]] || return 3
        return 0
    fi
    if [[ -f $plugin ]]; then
        CHECK_DETAIL="aws-ofi-nccl plugin $plugin, version unknown (no libnccl-ofi package)"
        return 3
    fi
    CHECK_DETAIL="no aws-ofi-nccl plugin (package libnccl-ofi or $plugin)"
    return 1
}

apply_ofi_bundled() {
    if [[ $DRY_RUN == 1 ]]; then
        printf '      = installed by the EFA installer; checked against AWS_OFI_NCCL_VERSION=%s\n' "$OFI_VERSION"
        return 0
    fi
    die "aws-ofi-nccl: the EFA installer should have installed it ($CHECK_DETAIL); run install_efa.sh, or pin AWS_OFI_NCCL_SOURCE_COMMIT to build one"
}

check_ofi_source() {
    local stamp=$FMINFRA_ROOT/opt/aws-ofi-nccl/.fminfra-commit
    CHECK_DETAIL="aws-ofi-nccl built from $(cat "$stamp" 2>/dev/null || printf 'nothing')"
    [[ -f $stamp && $(<"$stamp") == "$OFI_COMMIT" ]]
}

apply_ofi_source() {
    local src prefix=$FMINFRA_ROOT/opt/aws-ofi-nccl
    src=$(work_dir aws-ofi-nccl)
    pkg_install autoconf automake libtool make git
    git_checkout_commit https://github.com/aws/aws-ofi-nccl.git "$src" "$OFI_COMMIT" ""
    run env --chdir="$src" ./autogen.sh
    run env --chdir="$src" ./configure --prefix="$prefix" --with-libfabric="$FMINFRA_ROOT/opt/amazon/efa" --with-cuda="$CUDA_HOME"
    run make -C "$src" -j
    run make -C "$src" install
    write_file "$prefix/.fminfra-commit" "$OFI_COMMIT"
}

main() {
    node_script_init "$@"
    NCCL_PKG_VERSION="$(ver NCCL_VERSION)+cuda$(ver CUDA_VERSION)"
    OFI_VERSION=$(ver AWS_OFI_NCCL_VERSION)
    OFI_COMMIT=$(ver_optional AWS_OFI_NCCL_SOURCE_COMMIT)
    step nccl "NCCL $NCCL_PKG_VERSION" check_nccl apply_nccl
    if ((TYPE_EFA == 0)); then
        not_needed aws-ofi-nccl
    elif [[ -z $OFI_COMMIT ]]; then
        step aws-ofi-nccl "aws-ofi-nccl $OFI_VERSION bundled by EFA installer $(ver EFA_INSTALLER_VERSION)" check_ofi_bundled apply_ofi_bundled
    else
        step aws-ofi-nccl "aws-ofi-nccl from source at commit $OFI_COMMIT" check_ofi_source apply_ofi_source
    fi
    finish_steps
}

main "$@"
