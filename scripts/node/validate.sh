#!/usr/bin/env bash
# Node validation: one PASS/WARN/FAIL/SKIP line per check on stdout, then a one-line JSON summary.
# Exit 0 when nothing FAILs, 1 when a check FAILs, 2 on bad arguments.
#
#   validate.sh [--instance-type TYPE] [--nccl-hosts H1,H2 [--launcher srun|mpirun]]
#
# Checks: driver and GPU count, NVLink state (NVSwitch types), EFA device count against
# instance_types.tsv (which tests keep equal to fminfra/catalog.py), `fi_info -p efa`, the NCCL
# and aws-ofi-nccl versions NCCL actually loads (a one-node all_reduce_perf with NCCL_DEBUG=INFO),
# and with --nccl-hosts a multi-node all_reduce_perf compared with the type's measured
# thresholds (instance_types.tsv); types without a measured threshold report SKIP.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NCCL_TESTS_DIR=${FMINFRA_NCCL_TESTS_DIR:-$FMINFRA_ROOT/opt/nccl-tests/build}
NCCL_HOSTS=""
LAUNCHER=""
declare -a RESULTS=()
FAILED=0

usage() {
    cat <<USAGE
usage: validate.sh [--instance-type TYPE] [--nccl-hosts H1,H2] [--launcher srun|mpirun]
USAGE
}

parse_args() {
    while (($# > 0)); do
        case $1 in
        --instance-type)
            (($# >= 2)) || usage_error "--instance-type needs a value"
            TARGET_TYPE=$2
            shift
            ;;
        --nccl-hosts)
            (($# >= 2)) || usage_error "--nccl-hosts needs a comma-separated list of hosts"
            NCCL_HOSTS=$2
            shift
            ;;
        --launcher)
            (($# >= 2)) || usage_error "--launcher needs srun or mpirun"
            [[ $2 == srun || $2 == mpirun ]] || usage_error "--launcher must be srun or mpirun, got '$2'"
            LAUNCHER=$2
            shift
            ;;
        -h | --help)
            usage
            exit 0
            ;;
        *) usage_error "unknown argument '$1'; see --help" ;;
        esac
        shift
    done
}

json_string() {
    local s=$1
    s=${s//\\/\\\\}
    s=${s//\"/\\\"}
    s=${s//$'\t'/ }
    s=${s//$'\n'/ }
    printf '"%s"' "$s"
}

report() {
    local status=$1 name=$2 detail=$3
    printf '%s %s: %s\n' "$status" "$name" "$detail"
    [[ -n $LOG_FILE ]] && TZ=UTC0 printf '%(%Y-%m-%dT%H:%M:%SZ)T %s %s: %s\n' -1 "$status" "$name" "$detail" >>"$LOG_FILE"
    [[ $status == FAIL ]] && FAILED=1
    RESULTS+=("{\"check\":$(json_string "$name"),\"status\":\"$status\",\"detail\":$(json_string "$detail")}")
}

check_driver() {
    local versions count version
    if ! versions=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1); then
        report FAIL driver "nvidia-smi failed: $(head -n 1 <<<"$versions")"
        report FAIL gpu-count "no GPUs visible without a driver"
        return 0
    fi
    version=$(head -n 1 <<<"$versions")
    count=$(grep -c . <<<"$versions" || true)
    if [[ ${version%%.*} == "$(ver NVIDIA_DRIVER_BRANCH)" ]]; then
        report PASS driver "NVIDIA driver $version"
    else
        report WARN driver "NVIDIA driver $version, the manifest pins branch $(ver NVIDIA_DRIVER_BRANCH)"
    fi
    if ((count == TYPE_GPUS)); then
        report PASS gpu-count "$count GPUs, as $TARGET_TYPE has"
    else
        report FAIL gpu-count "$count GPUs visible, $TARGET_TYPE has $TYPE_GPUS"
    fi
}

check_nvlink() {
    local out up inactive
    if [[ $TYPE_NVSWITCH != yes ]]; then
        report SKIP nvlink "$TARGET_TYPE has no NVSwitch"
        return 0
    fi
    if ! out=$(nvidia-smi nvlink -s 2>&1); then
        report FAIL nvlink "nvidia-smi nvlink -s failed: $(head -n 1 <<<"$out")"
        return 0
    fi
    up=$(grep -c 'GB/s' <<<"$out" || true)
    inactive=$(grep -ci 'inactive' <<<"$out" || true)
    if ((inactive > 0)); then
        report FAIL nvlink "$inactive NVLinks inactive, $up up"
    elif ((up == 0)); then
        report FAIL nvlink "no active NVLink reported by nvidia-smi nvlink -s"
    else
        report PASS nvlink "$up NVLinks up, none inactive"
    fi
}

check_efa() {
    local count out fi_info=fi_info
    if ((TYPE_EFA == 0)); then
        report SKIP efa-count "$TARGET_TYPE has no EFA"
        report SKIP fi-info "$TARGET_TYPE has no EFA"
        return 0
    fi
    count=$(lspci 2>/dev/null | grep -ci 'efa' || true)
    if ((count < TYPE_EFA)); then
        report FAIL efa-count "$count EFA devices, $TARGET_TYPE has $TYPE_EFA (check the launch template's network interfaces)"
    elif ((count > TYPE_EFA)); then
        report WARN efa-count "$count EFA devices, more than the $TYPE_EFA expected for $TARGET_TYPE"
    else
        report PASS efa-count "$count EFA devices, as $TARGET_TYPE has"
    fi
    command -v fi_info >/dev/null || fi_info=$FMINFRA_ROOT/opt/amazon/efa/bin/fi_info
    if out=$("$fi_info" -p efa 2>&1) && grep -q 'provider: efa' <<<"$out"; then
        report PASS fi-info "libfabric lists the efa provider"
    else
        report FAIL fi-info "fi_info -p efa does not list the efa provider: $(head -n 1 <<<"$out")"
    fi
}

check_loaded_versions() {
    local out nccl ofi expected_nccl
    if [[ ! -x $NCCL_TESTS_DIR/all_reduce_perf ]]; then
        report SKIP nccl-version "nccl-tests not built ($NCCL_TESTS_DIR/all_reduce_perf); run install_nccl_tests.sh"
        report SKIP ofi-plugin "nccl-tests not built"
        return 0
    fi
    out=$(NCCL_DEBUG=INFO "$NCCL_TESTS_DIR/all_reduce_perf" -b 8 -e 8 -g "$TYPE_GPUS" 2>&1) || true
    nccl=$(sed -n 's/.*NCCL version \([0-9][0-9.]*\).*/\1/p' <<<"$out" | head -n 1)
    ofi=$(sed -n 's/.*aws-ofi-nccl v\{0,1\}\([0-9][0-9.]*\).*/\1/p' <<<"$out" | head -n 1)
    expected_nccl=$(ver NCCL_VERSION)
    expected_nccl=${expected_nccl%-*}
    if [[ -z $nccl ]]; then
        report FAIL nccl-version "all_reduce_perf did not report an NCCL version: $(tail -n 1 <<<"$out")"
    elif [[ $nccl == "$expected_nccl" ]]; then
        report PASS nccl-version "NCCL $nccl loaded"
    else
        report WARN nccl-version "NCCL $nccl loaded, the manifest pins $expected_nccl"
    fi
    if ((TYPE_EFA == 0)); then
        report SKIP ofi-plugin "$TARGET_TYPE has no EFA"
    elif [[ -z $ofi ]]; then
        report FAIL ofi-plugin "NCCL did not load the aws-ofi-nccl plugin (no 'aws-ofi-nccl' in the NCCL_DEBUG=INFO output)"
    elif [[ -n $(ver_optional AWS_OFI_NCCL_SOURCE_COMMIT) || $ofi == "$(ver AWS_OFI_NCCL_VERSION)" ]]; then
        report PASS ofi-plugin "aws-ofi-nccl $ofi loaded"
    else
        report WARN ofi-plugin "aws-ofi-nccl $ofi loaded, the manifest expects $(ver AWS_OFI_NCCL_VERSION)"
    fi
}

# Open MPI's mpirun starts the remote ranks over SSH: every host other than this one must accept
# BatchMode SSH from here. fminfra sets up no SSH trust between ec2 nodes (docs/node-bootstrap.md,
# "Multi-node validation"), so say so in one line instead of hanging on a password prompt.
mpi_preflight() {
    local host out self addresses
    self=$(hostname)
    addresses=" $(hostname -I 2>/dev/null || true) "
    for host in "$@"; do
        [[ $host == "$self" || $host == localhost || $host == "${self%%.*}" || $addresses == *" $host "* ]] && continue
        if ! out=$(ssh -o BatchMode=yes -o ConnectTimeout=5 "$host" true 2>&1); then
            report FAIL nccl-allreduce "mpirun needs passwordless SSH from $self to $host, which fails ($(head -n 1 <<<"$out")); fminfra sets none up on ec2 nodes: set up keys (docs/node-bootstrap.md) or run inside Slurm with --launcher srun"
            return 1
        fi
    done
}

# The mpirun command line of AWS's EFA/NCCL guide (docs/facts/node-software.md#efa-guide-mpirun-flags):
# root allowed (user data and lifecycle scripts run as root), MPI's own traffic on TCP only
# (pml ^cm, btl tcp,self) away from lo and docker0, no CPU binding, the environment passed on.
mpirun_command() {
    local mpirun=mpirun hostlist="$1:$TYPE_GPUS,$2:$TYPE_GPUS"
    command -v mpirun >/dev/null || mpirun=$FMINFRA_ROOT/opt/amazon/openmpi/bin/mpirun
    cmd=("$mpirun" --allow-run-as-root -np $((2 * TYPE_GPUS)) --host "$hostlist"
        --map-by "ppr:$TYPE_GPUS:node" --bind-to none
        --mca pml "^cm" --mca btl "tcp,self" --mca btl_tcp_if_exclude "lo,docker0"
        -x PATH -x LD_LIBRARY_PATH)
}

check_allreduce() {
    local -a hosts cmd
    local out busbw
    if [[ $TYPE_NCCL_FAIL_GBPS == - ]]; then
        report SKIP nccl-allreduce "no measured threshold for $TARGET_TYPE (only measured types get one, see instance_types.tsv)"
        return 0
    fi
    if [[ -z $NCCL_HOSTS ]]; then
        report SKIP nccl-allreduce "multi-node test not requested (--nccl-hosts H1,H2)"
        return 0
    fi
    IFS=, read -r -a hosts <<<"$NCCL_HOSTS"
    if ((${#hosts[@]} != 2)); then
        report SKIP nccl-allreduce "the thresholds were measured on two nodes; got ${#hosts[@]} hosts"
        return 0
    fi
    if [[ ! -x $NCCL_TESTS_DIR/all_reduce_perf ]]; then
        report FAIL nccl-allreduce "nccl-tests not built ($NCCL_TESTS_DIR/all_reduce_perf)"
        return 0
    fi
    if [[ -z $LAUNCHER ]]; then
        if [[ -n ${SLURM_JOB_ID:-} ]] && command -v srun >/dev/null; then LAUNCHER=srun; else LAUNCHER=mpirun; fi
    fi
    if [[ $LAUNCHER == srun ]]; then
        # Inside a Slurm allocation (HyperPod Slurm): Slurm starts the ranks, no SSH needed.
        cmd=(srun --nodelist="$NCCL_HOSTS" --nodes=2 --ntasks-per-node="$TYPE_GPUS" --mpi=pmix --export=ALL)
    else
        mpi_preflight "${hosts[@]}" || return 0
        mpirun_command "${hosts[@]}"
    fi
    if ! out=$("${cmd[@]}" "$NCCL_TESTS_DIR/all_reduce_perf" -b 1G -e 2G -f 2 -g 1 2>&1); then
        report FAIL nccl-allreduce "$LAUNCHER all_reduce_perf failed: $(tail -n 1 <<<"$out")"
        return 0
    fi
    # Rows: size count type redop root time algbw busbw #wrong ...; out-of-place busbw is field 8.
    busbw=$(awk '$1 == 1073741824 || $1 == 2147483648 { if (min == "" || $8 < min) min = $8 } END { print min }' <<<"$out")
    if [[ -z $busbw ]]; then
        report FAIL nccl-allreduce "no 1 GiB / 2 GiB rows in the all_reduce_perf output"
    elif awk -v b="$busbw" -v t="$TYPE_NCCL_FAIL_GBPS" 'BEGIN { exit !(b < t) }'; then
        report FAIL nccl-allreduce "bus bandwidth $busbw GB/s at 1-2 GiB on 2x $TARGET_TYPE, below the $TYPE_NCCL_FAIL_GBPS GB/s floor"
    elif awk -v b="$busbw" -v t="$TYPE_NCCL_WARN_GBPS" 'BEGIN { exit !(b < t) }'; then
        report WARN nccl-allreduce "bus bandwidth $busbw GB/s at 1-2 GiB on 2x $TARGET_TYPE, below the $TYPE_NCCL_WARN_GBPS GB/s expected"
    else
        report PASS nccl-allreduce "bus bandwidth $busbw GB/s at 1-2 GiB on 2x $TARGET_TYPE"
    fi
}

summary() {
    local result=PASS joined
    ((FAILED == 0)) || result=FAIL
    joined=$(
        IFS=,
        printf '%s' "${RESULTS[*]}"
    )
    printf '{"instance_type":%s,"result":"%s","checks":[%s]}\n' "$(json_string "$TARGET_TYPE")" "$result" "$joined"
}

main() {
    parse_args "$@"
    load_manifest
    if [[ -z $TARGET_TYPE ]]; then
        TARGET_TYPE=$(imds_instance_type) ||
            usage_error "cannot read the instance type from instance metadata ($FMINFRA_IMDS_URL); pass --instance-type"
    fi
    TARGET_TYPE=${TARGET_TYPE#ml.}
    lookup_instance_type "$TARGET_TYPE"
    init_logging
    check_driver
    check_nvlink
    check_efa
    check_loaded_versions
    check_allreduce
    summary
    exit "$FAILED"
}

main "$@"
