#!/usr/bin/env bash
# nccl-tests NCCL_TESTS_VERSION at the pinned NCCL_TESTS_COMMIT, built against the installed NCCL
# and the EFA installer's Open MPI (types with EFA); binaries in /opt/nccl-tests/build. The stamp
# names the NCCL actually installed (the manifest's, or the one the image carries), so the tests
# are rebuilt when NCCL changes.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

check_nccl_tests() {
    local stamp=$FMINFRA_ROOT/opt/nccl-tests/.fminfra-stamp
    CHECK_DETAIL="nccl-tests: $(cat "$stamp" 2>/dev/null || printf 'not built by fminfra')"
    [[ -f $stamp && $(<"$stamp") == "$STAMP" ]]
}

apply_nccl_tests() {
    local src prefix=$FMINFRA_ROOT/opt/nccl-tests
    src=$(work_dir nccl-tests)
    if [[ $PKG == apt ]]; then pkg_install build-essential git; else pkg_install gcc gcc-c++ make git; fi
    git_checkout_commit https://github.com/NVIDIA/nccl-tests.git "$src" "$NCCL_TESTS_COMMIT" "v$NCCL_TESTS_VERSION"
    # Open MPI comes with the EFA installer; types without EFA get single-node (MPI=0) binaries.
    local -a mpi=(MPI=0)
    ((TYPE_EFA == 0)) || mpi=(MPI=1 MPI_HOME="$FMINFRA_ROOT/opt/amazon/openmpi")
    run make -C "$src" -j "${mpi[@]}" CUDA_HOME="$(cuda_home)" NCCL_HOME="$FMINFRA_ROOT$NCCL_HOME" BUILDDIR="$prefix/build"
    write_file "$prefix/.fminfra-stamp" "$STAMP"
}

main() {
    node_script_init "$@"
    NCCL_TESTS_VERSION=$(ver NCCL_TESTS_VERSION)
    NCCL_TESTS_COMMIT=$(ver_optional NCCL_TESTS_COMMIT)
    local nccl="<installed NCCL>"
    NCCL_HOME=/usr
    if [[ $DRY_RUN == 0 ]]; then
        nccl=$(nccl_found | cut -f1,2 | tr '\t' ' ') || nccl=""
        # NCCL compiled into a CUDA folder (the HyperPod AMIs) has its headers there; a package's are in /usr.
        [[ $nccl =~ \ (/usr/local/cuda[^/]*)/lib[^/]*/libnccl\.so\.2$ ]] && NCCL_HOME=${BASH_REMATCH[1]}
    fi
    STAMP="nccl-tests $NCCL_TESTS_VERSION commit ${NCCL_TESTS_COMMIT:-unpinned} against NCCL ${nccl:-not installed}"
    step nccl-tests "$STAMP" check_nccl_tests apply_nccl_tests optional
    finish_steps
}

main "$@"
