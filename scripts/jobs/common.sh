# shellcheck shell=bash
# What the acceptance jobs share. Sourced by each *.sbatch through $FMINFRA_JOBS_DIR, never by a
# path relative to the batch script: sbatch hands the script to slurmctld, and slurmd runs a copy
# from its spool folder (docs/facts/jobs.md#sbatch-runs-a-copy), so the jobs folder must be named.
#
# Settings (environment, usually passed with `sbatch --export=ALL,NAME=value`):
#   FMINFRA_JOBS_DIR      this folder, on a file system every node mounts (required)
#   FMINFRA_RESULTS_DIR   where each job writes its logs and results (required, shared too)
#   GPUS_PER_NODE         GPUs per node (default 8)
#   FMINFRA_IMAGE         container of the DDP job (default: the manifest's pinned image)
#   FMINFRA_ALLOW_UNPINNED=1  run an image that is not pinned by digest (refused otherwise)

GPUS_PER_NODE=${GPUS_PER_NODE:-8}
FMINFRA_VERSIONS=${FMINFRA_VERSIONS:-$FMINFRA_JOBS_DIR/../node/versions.env}

log() {
    printf '%s %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2
}

usage_error() {
    printf '%s\n' "$*" >&2
    exit 2
}

trap 'log "failed: line $LINENO: $BASH_COMMAND"' ERR

# shellcheck source=../node/manifest.sh
source "$FMINFRA_JOBS_DIR/../node/manifest.sh"

# The job runs inside an allocation: sbatch sets these for the batch step.
require_allocation() {
    local name
    for name in SLURM_JOB_ID SLURM_JOB_NUM_NODES SLURM_JOB_NODELIST; do
        [[ -n ${!name:-} ]] || usage_error "$name is not set: submit this script with sbatch, do not run it directly"
    done
    [[ -n ${FMINFRA_RESULTS_DIR:-} ]] || usage_error "FMINFRA_RESULTS_DIR is not set (sbatch --export=ALL,FMINFRA_RESULTS_DIR=/fsx/...)"
    [[ $GPUS_PER_NODE =~ ^[1-9][0-9]*$ ]] || usage_error "GPUS_PER_NODE must be a positive integer, got '$GPUS_PER_NODE'"
    mkdir -p "$FMINFRA_RESULTS_DIR"
}

# The first host of the allocation (the rendezvous host of torchrun). No pipe into head: under
# pipefail a writer that head has stopped reading from would fail the job.
first_host() {
    local hosts
    hosts=$(scontrol show hostnames "$SLURM_JOB_NODELIST")
    [[ -n $hosts ]] || usage_error "scontrol show hostnames '$SLURM_JOB_NODELIST' printed no host"
    printf '%s\n' "${hosts%%$'\n'*}"
}

# pyxis_image REFERENCE: registry/image[:tag][@sha256:...] -> pyxis's REGISTRY#IMAGE form
# (docs/facts/jobs.md#pyxis-container-image-syntax).
pyxis_image() {
    local ref=$1 registry rest
    registry=${ref%%/*}
    rest=${ref#*/}
    if [[ $ref == */* && ($registry == *.* || $registry == *:*) ]]; then
        printf '%s#%s' "$registry" "$rest"
    else
        printf '%s' "$ref"
    fi
}

# The DDP job's image: FMINFRA_IMAGE, else the manifest's ACCEPT_PYTORCH_IMAGE@ACCEPT_PYTORCH_IMAGE_DIGEST.
# An image without a digest is refused unless FMINFRA_ALLOW_UNPINNED=1.
container_image() {
    local ref digest
    if [[ -n ${FMINFRA_IMAGE:-} ]]; then
        ref=$FMINFRA_IMAGE
    else
        load_manifest
        ref=$(ver ACCEPT_PYTORCH_IMAGE)
        digest=$(ver_optional ACCEPT_PYTORCH_IMAGE_DIGEST)
        [[ -z $digest ]] || ref="$ref@$digest"
    fi
    if [[ ! $ref =~ @sha256:[0-9a-f]{64}$ ]]; then
        if [[ ${FMINFRA_ALLOW_UNPINNED:-0} != 1 ]]; then
            usage_error "image '$ref' is not pinned by digest (set ACCEPT_PYTORCH_IMAGE_DIGEST in $FMINFRA_VERSIONS, or FMINFRA_ALLOW_UNPINNED=1 to run it anyway)"
        fi
        log "WARNING: running image '$ref', not pinned by digest (FMINFRA_ALLOW_UNPINNED=1)"
    fi
    pyxis_image "$ref"
}
