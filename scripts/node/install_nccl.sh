#!/usr/bin/env bash
# NCCL from the NVIDIA repository at NCCL_VERSION built for NCCL_PACKAGE_CUDA (NVIDIA publishes each
# NCCL release for particular CUDA versions only: docs/facts/node-software.md#nccl-package-cuda-suffix),
# checked against the configured repository before anything is installed, then held; and the
# aws-ofi-nccl network plugin: the one bundled by the EFA installer, checked against
# AWS_OFI_NCCL_VERSION, or built from AWS_OFI_NCCL_SOURCE_COMMIT when the manifest sets one.
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

# What a program loads (lib.sh nccl_found), not which package is installed: the HyperPod AMIs
# compile NCCL into their CUDA folders where their release notes say so, and have no NCCL package.
# The package's version is reported (and compared) only where the loaded library is the package's.
# With FMINFRA_NCCL_FROM=container (HyperPod: no x86_64 release entry names host NCCL, and jobs
# bring theirs in the container, docs/facts/hyperpod.md#hyperpod-nccl-from-container) a node
# without one is a WARN in --verify that says so, never a FAIL.
check_nccl() {
    local name=libnccl2 found version path how package
    [[ $PKG == dnf ]] && name=libnccl
    if ! found=$(nccl_found); then
        if [[ $FMINFRA_NCCL_FROM == container ]]; then
            CHECK_DETAIL="no host NCCL (libnccl.so.2 is neither on the loader path nor in a CUDA folder); on this node NCCL comes from the job's container (pyxis/enroot on Slurm, the pod's image on EKS), as FMINFRA_NCCL_FROM=container says"
        else
            CHECK_DETAIL="no NCCL: libnccl.so.2 is neither on the loader path (LD_LIBRARY_PATH, ldconfig -p) nor in a CUDA folder"
        fi
        return 1
    fi
    IFS=$'\t' read -r version path how <<<"$found"
    package=$(pkg_version "$name")
    # The detail names what the image carries, not how it is found today, so that a marker written
    # before configure_environment.sh put a CUDA folder on the loader path still matches after.
    if [[ $path == /usr/local/cuda*/lib* ]]; then
        CHECK_DETAIL="NCCL $version compiled into $path"
        [[ $how != CUDA* ]] || log INFO "nccl: $path is not on the loader path; configure_environment.sh puts its folder on it"
    else
        CHECK_DETAIL="NCCL $version at $path ($how)"
    fi
    [[ -n $package ]] && CHECK_DETAIL+="; package $name $package"
    [[ ${version%%+*} == "${NCCL_PKG_VERSION%%-*}" ]] || return 3
    [[ -z $package || $package == "$NCCL_PKG_VERSION" ]] || return 3
}

apply_nccl() {
    local -a packages names=(libnccl2 libnccl-dev)
    [[ $PKG == dnf ]] && names=(libnccl libnccl-devel)
    mapfile -t packages < <(nccl_packages)
    require_available "${names[0]}" "$NCCL_PKG_VERSION"
    [[ $REPLACING == 1 ]] && pkg_unhold "${names[@]}"
    pkg_install "${packages[@]}"
    pkg_hold "${names[@]}"
}

check_ofi_bundled() {
    local version dir
    local -a dirs
    mapfile -t dirs < <(ofi_plugin_dirs)
    version=$(pkg_version libnccl-ofi)
    if [[ -n $version ]]; then
        CHECK_DETAIL="aws-ofi-nccl $version (EFA installer)"
        [[ $version == "$OFI_VERSION" || $version == "$OFI_VERSION"-* ]] && return 0
        # The bundled plugin moves with the EFA installer (install_efa.sh), never on its own.
        CHECK_DETAIL+="; it changes only with the EFA installer"
        return 5
    fi
    if dir=$(first_dir_with 'libnccl-net*.so' "${dirs[@]}"); then
        CHECK_DETAIL="aws-ofi-nccl plugin in $dir, version unknown (no libnccl-ofi package); it changes only with the EFA installer"
        return 5
    fi
    CHECK_DETAIL="no aws-ofi-nccl plugin (package libnccl-ofi, or libnccl-net-ofi.so in ${dirs[*]})"
    return 1
}

apply_ofi_bundled() {
    if [[ $DRY_RUN == 1 ]]; then
        printf '      = installed by the EFA installer; checked against AWS_OFI_NCCL_VERSION=%s\n' "$OFI_VERSION"
        return 0
    fi
    die "aws-ofi-nccl: the EFA installer should have installed it ($CHECK_DETAIL); run install_efa.sh, or pin AWS_OFI_NCCL_SOURCE_COMMIT to build one"
}

# The compiler must accept -std=c++20 (GCC 10 or later; Ubuntu 22.04/24.04 and AL2023 ship newer).
require_cxx20() {
    if [[ $DRY_RUN == 1 ]]; then
        printf '      + check that g++ accepts -std=c++20\n'
        return 0
    fi
    printf 'int main() { return 0; }\n' | g++ -std=c++20 -x c++ -fsyntax-only - 2>/dev/null ||
        die "aws-ofi-nccl: the source build needs a C++20 compiler; g++ $(g++ -dumpversion 2>/dev/null || printf 'is missing') does not accept -std=c++20"
}

check_ofi_source() {
    local stamp=$FMINFRA_ROOT/opt/aws-ofi-nccl/.fminfra-commit
    CHECK_DETAIL="aws-ofi-nccl built from $(cat "$stamp" 2>/dev/null || printf 'nothing')"
    [[ -f $stamp && $(<"$stamp") == "$OFI_COMMIT" ]]
}

apply_ofi_source() {
    local src prefix=$FMINFRA_ROOT/opt/aws-ofi-nccl
    src=$(work_dir aws-ofi-nccl)
    # Build requirements of aws-ofi-nccl >= 1.17: hwloc and a C++20 compiler (configure.ac:
    # AX_CXX_COMPILE_STDCXX([20]) and CHECK_PKG_HWLOC), docs/facts/node-software.md#aws-ofi-nccl-build-requirements
    if [[ $PKG == apt ]]; then
        pkg_install autoconf automake libtool make git g++ libhwloc-dev
    else
        pkg_install autoconf automake libtool make git gcc-c++ hwloc-devel
    fi
    require_cxx20
    git_checkout_commit https://github.com/aws/aws-ofi-nccl.git "$src" "$OFI_COMMIT" ""
    run env --chdir="$src" ./autogen.sh
    run env --chdir="$src" ./configure --prefix="$prefix" --with-libfabric="$FMINFRA_ROOT/opt/amazon/efa" --with-cuda="$(cuda_home)"
    run make -C "$src" -j
    run make -C "$src" install
    write_file "$prefix/.fminfra-commit" "$OFI_COMMIT"
}

main() {
    node_script_init "$@"
    NCCL_PKG_VERSION="$(ver NCCL_VERSION)+cuda$(ver NCCL_PACKAGE_CUDA)"
    OFI_VERSION=$(ver AWS_OFI_NCCL_VERSION)
    OFI_COMMIT=$(ver_optional AWS_OFI_NCCL_SOURCE_COMMIT)
    local policy=required
    case $FMINFRA_NCCL_FROM in
    host) ;;
    container) policy=optional ;;
    *) usage_error "FMINFRA_NCCL_FROM='$FMINFRA_NCCL_FROM' is not one of host, container (where jobs get NCCL)" ;;
    esac
    step nccl "NCCL $NCCL_PKG_VERSION" check_nccl apply_nccl "$policy"
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
