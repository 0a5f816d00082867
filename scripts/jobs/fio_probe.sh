#!/usr/bin/env bash
# One node's part of fsx-probe.sbatch (run by srun, one task per node) or of the EKS fio Job (one
# pod per node): sequential write, then sequential read of the same files, each as FIO_JOBS
# parallel fio jobs with direct I/O, in $FSX_DIR/fminfra-accept/<run>/<node>; the folder is
# removed afterwards. <run> is FMINFRA_RUN_ID or SLURM_JOB_ID; <node> FMINFRA_NODE_NAME,
# SLURMD_NODENAME or the short host name.
set -o errexit -o nounset -o pipefail

FIO_JOBS=${FIO_JOBS:-8}
FIO_SIZE=${FIO_SIZE:-4G}
FIO_RUNTIME=${FIO_RUNTIME:-60}

main() {
    local node phase
    node=${FMINFRA_NODE_NAME:-${SLURMD_NODENAME:-$(hostname -s)}}
    command -v fio >/dev/null || {
        echo "$node: fio is not installed (apt-get install fio / dnf install fio)" >&2
        exit 2
    }
    PROBE_DIR=$FSX_DIR/fminfra-accept/${FMINFRA_RUN_ID:-${SLURM_JOB_ID:?}}/$node
    mkdir -p "$PROBE_DIR"
    trap 'rm -rf "$PROBE_DIR"' EXIT
    for phase in write read; do
        fio --name="fminfra-$phase" --directory="$PROBE_DIR" --rw="$phase" --bs=1M --direct=1 \
            --ioengine=libaio --iodepth=16 --numjobs="$FIO_JOBS" --size="$FIO_SIZE" \
            --runtime="$FIO_RUNTIME" --group_reporting \
            --output-format=json --output="$FMINFRA_RESULTS_DIR/fio-$node-$phase.json"
    done
}

main "$@"
