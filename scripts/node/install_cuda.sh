#!/usr/bin/env bash
# CUDA toolkit CUDA_VERSION from the NVIDIA repository.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

check_cuda() {
    local version other
    version=$(pkg_version "cuda-toolkit-$CUDA_DASHED")
    if [[ -n $version || -x $CUDA_HOME/bin/nvcc ]]; then
        CHECK_DETAIL="CUDA $(ver CUDA_VERSION) in $CUDA_HOME"
        return 0
    fi
    for other in "$FMINFRA_ROOT"/usr/local/cuda-*/bin/nvcc; do
        if [[ -x $other ]]; then
            CHECK_DETAIL="another CUDA: ${other%/bin/nvcc}"
            return 3
        fi
    done
    CHECK_DETAIL="no CUDA toolkit"
    return 1
}

apply_cuda() {
    pkg_install "cuda-toolkit-$CUDA_DASHED"
}

main() {
    node_script_init "$@"
    step cuda-toolkit "cuda-toolkit-$CUDA_DASHED (CUDA $(ver CUDA_VERSION))" check_cuda apply_cuda
    finish_steps
}

main "$@"
