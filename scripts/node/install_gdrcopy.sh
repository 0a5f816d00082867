#!/usr/bin/env bash
# GDRCopy GDRCOPY_VERSION, built from github.com/NVIDIA/gdrcopy at the pinned GDRCOPY_COMMIT
# (library, tools and the gdrdrv kernel module).
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

check_gdrcopy() {
    local version stamp=$FMINFRA_ROOT/opt/gdrcopy/.fminfra-stamp
    if [[ -f $stamp && $(<"$stamp") == "$STAMP" ]]; then
        CHECK_DETAIL="gdrcopy built by fminfra ($STAMP)"
        return 0
    fi
    version=$(pkg_version gdrcopy)
    [[ -n $version ]] || version=$(pkg_version libgdrapi)
    if [[ -n $version ]]; then
        CHECK_DETAIL="gdrcopy $version (package)"
        [[ $version == "$GDRCOPY_VERSION"* ]] || return 3
        return 0
    fi
    CHECK_DETAIL="no gdrcopy"
    return 1
}

apply_gdrcopy() {
    local src prefix=$FMINFRA_ROOT/opt/gdrcopy
    src=$(work_dir gdrcopy)
    if [[ $PKG == apt ]]; then pkg_install build-essential dkms pkg-config git; else pkg_install gcc gcc-c++ make dkms pkgconf git; fi
    git_checkout_commit https://github.com/NVIDIA/gdrcopy.git "$src" "$GDRCOPY_COMMIT" "v$GDRCOPY_VERSION"
    run make -C "$src" prefix="$prefix" CUDA="$CUDA_HOME" lib lib_install driver
    run env --chdir="$src" ./insmod.sh
    write_file "$prefix/.fminfra-stamp" "$STAMP"
}

main() {
    node_script_init "$@"
    GDRCOPY_VERSION=$(ver GDRCOPY_VERSION)
    GDRCOPY_COMMIT=$(ver_optional GDRCOPY_COMMIT)
    STAMP="gdrcopy $GDRCOPY_VERSION commit ${GDRCOPY_COMMIT:-unpinned}"
    step gdrcopy "$STAMP" check_gdrcopy apply_gdrcopy
    finish_steps
}

main "$@"
