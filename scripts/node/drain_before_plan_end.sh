#!/usr/bin/env bash
# Drains this HyperPod Slurm node before its instance group's SageMaker training plan ends, so
# its jobs can checkpoint before SageMaker starts terminating the plan's instances.
#
#   drain_before_plan_end.sh install   write and start fminfra-plan-drain.service (runs `watch`); on_create.sh calls it
#   drain_before_plan_end.sh watch     read the plan's reserved capacities (DescribeTrainingPlan) every
#                                      FMINFRA_PLAN_POLL_SECONDS, and drain once per capacity end, at that
#                                      end - 30 minutes - the drain
#   drain_before_plan_end.sh check     read the plan once; drain if the drain time has come
#
# A plan can hold several reserved capacities (ReservedCapacitySummaries, each with its own
# InstanceType and EndTime; docs/facts/hyperpod.md#training-plan-reserved-capacities), and SageMaker
# begins terminating the instances of each 30 minutes before that capacity's end
# (docs/facts/hyperpod.md#training-plan-reserved-capacity-termination). The end drained for is the
# earliest not yet passed of the capacities of the group's instance type (FMINFRA_INSTANCE_TYPE),
# not Failed; the plan's EndTime where it lists none. A capacity without an EndTime (the member is
# optional: a Pending one) has no end to drain for and is skipped, as the HyperPod EKS handler
# (plan_drain_handler/index.py's plan_end) does. The plan is read again on every poll, so
# a plan whose end moves is followed, and each later capacity's end gets its own drain. The drain
# starts FMINFRA_PLAN_DRAIN_SECONDS before the terminations and ends, jobs or not,
# FMINFRA_DRAIN_MARGIN_SECONDS before them. The drain is drain_lib.sh's Slurm drain: the node DRAIN,
# FMINFRA_DRAIN_SIGNAL (USR1) to its jobs, then DOWN for jobs still running at the deadline. A node
# is drained once per end (a marker under FMINFRA_ROOT/var/lib/fminfra); a node without scontrol,
# or whose state sinfo cannot read, records no drain and tries again at the next poll. A node
# already out of service for a reason not fminfra's (DRAIN, DOWN, FAIL set by an operator or by
# Slurm: drain_lib.sh's slurm_held_by_another) is left as it is, its jobs not signalled and no
# drain recorded, and checked again at the next poll. A node drained for an end that then passes
# with the node still there (the plan was extended, or its next capacity goes on), or for an end
# that moved later, is resumed (`scontrol update State=RESUME`), but only while its Slurm Reason is
# still the one this script set ("fminfra: training plan ends ..."): a node an operator drained
# stays drained. `install` copies the scripts to
# /opt/fminfra/node and gives the unit a PATH with /opt/slurm/bin (drain_lib.sh's install_service).
#
# Settings (environment; on_create.sh sets them from provisioning_parameters.json's plan_drains):
#   FMINFRA_PLAN_ARN                 the group's training plan (required)
#   FMINFRA_INSTANCE_TYPE            the group's instance type (ml.p5.48xlarge): whose capacities count;
#                                    empty: every capacity of the plan
#   FMINFRA_PLAN_DRAIN_SECONDS       how long before the terminations the drain starts (default 600)
#   FMINFRA_PLAN_POLL_SECONDS        how often the plan's end is read (default 300)
#   FMINFRA_DRAIN_MARGIN_SECONDS     kept before the terminations (default 60)
#   FMINFRA_DRAIN_SIGNAL, FMINFRA_DRAIN_POLL_SECONDS, FMINFRA_SLURM_NODE_NAME   as in drain_lib.sh
#                                    (FMINFRA_DRAIN_POLL_SECONDS, the drain's poll, may be a decimal: 0.5)
#   FMINFRA_AWS_REGION; lib.sh's FMINFRA_ROOT, FMINFRA_LOG_DIR, FMINFRA_RETRIES
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=drain_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/drain_lib.sh"

FMINFRA_PLAN_ARN=${FMINFRA_PLAN_ARN:-}
FMINFRA_INSTANCE_TYPE=${FMINFRA_INSTANCE_TYPE:-}
FMINFRA_PLAN_DRAIN_SECONDS=${FMINFRA_PLAN_DRAIN_SECONDS:-600}
FMINFRA_PLAN_POLL_SECONDS=${FMINFRA_PLAN_POLL_SECONDS:-300}
FMINFRA_DRAIN_MARGIN_SECONDS=${FMINFRA_DRAIN_MARGIN_SECONDS:-60}
FMINFRA_AWS_REGION=${FMINFRA_AWS_REGION:-}
# SageMaker's terminations start this long before the plan's end.
PLAN_TERMINATES_BEFORE_END_S=1800
UNIT=fminfra-plan-drain.service
SCRIPT=$NODE_DIR/$(basename "${BASH_SOURCE[0]}")
STATE_DIR=$FMINFRA_ROOT/var/lib/fminfra
# The Slurm Reason this script's drain sets (drain_lib.sh prefixes FMINFRA_REASON_PREFIX); a node
# whose Reason starts with it was drained here, and only such a node is resumed.
PLAN_DRAIN_REASON="${FMINFRA_REASON_PREFIX}training plan ends"
# When `check` last found the drain still ahead: the epoch second it starts.
DRAIN_AT=

require_settings() {
    [[ $FMINFRA_PLAN_ARN =~ ^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:[0-9]{12}:training-plan/[a-zA-Z0-9](-*[a-zA-Z0-9]){0,63}$ ]] ||
        usage_error "FMINFRA_PLAN_ARN must be a training plan ARN (arn:aws:sagemaker:REGION:ACCOUNT:training-plan/NAME), got '$FMINFRA_PLAN_ARN'"
    [[ -z $FMINFRA_INSTANCE_TYPE || $FMINFRA_INSTANCE_TYPE =~ ^ml\.[a-z0-9-]+\.[a-z0-9]+$ ]] ||
        usage_error "FMINFRA_INSTANCE_TYPE must be a SageMaker instance type (ml.p5.48xlarge) or empty, got '$FMINFRA_INSTANCE_TYPE'"
    local name
    for name in FMINFRA_PLAN_DRAIN_SECONDS FMINFRA_PLAN_POLL_SECONDS FMINFRA_DRAIN_MARGIN_SECONDS; do
        [[ ${!name} =~ ^[0-9]+$ ]] || usage_error "$name must be a whole number of seconds, got '${!name}'"
    done
    require_drain_poll
    ((FMINFRA_PLAN_POLL_SECONDS > 0)) || usage_error "FMINFRA_PLAN_POLL_SECONDS must be 1 or more, got 0"
}

# A timestamp as the CLI prints it, in epoch seconds: ISO 8601, or epoch seconds with
# cli_timestamp_format=wire (docs/facts/hyperpod.md#describe-training-plan-end-time).
epoch_of() {
    if [[ $1 =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
        printf '%s\n' "${1%.*}"
    else
        date -u -d "$1" +%s 2>/dev/null
    fi
}

describe_plan() {
    retry aws sagemaker describe-training-plan --training-plan-name "$FMINFRA_PLAN_ARN" \
        --query "$1" --output text ${FMINFRA_AWS_REGION:+--region "$FMINFRA_AWS_REGION"}
}

# The end to drain for, in epoch seconds: the earliest end not yet passed of the plan's reserved
# capacities of FMINFRA_INSTANCE_TYPE (not Failed), or the plan's EndTime where it lists none
# of that type. Nothing printed: every end has passed, or none is known. A missing EndTime is
# "None" in the CLI's text output (docs/facts/hyperpod.md#describe-training-plan-missing-end-time).
plan_end() {
    local rows type status end epoch found=0 next=
    rows=$(describe_plan 'ReservedCapacitySummaries[].[InstanceType,Status,EndTime]') || return 1
    while IFS=$'\t' read -r type status end; do
        [[ -n $type && $type != None ]] || continue
        [[ -z $FMINFRA_INSTANCE_TYPE || $type == "$FMINFRA_INSTANCE_TYPE" ]] || continue
        [[ $status != Failed ]] || continue
        found=1
        [[ -n $end && $end != None ]] || continue
        epoch=$(epoch_of "$end") || {
            log ERROR "DescribeTrainingPlan gave a $type capacity of $FMINFRA_PLAN_ARN no end time (EndTime '$end')"
            return 1
        }
        if ((epoch > $(now))) && { [[ -z $next ]] || ((epoch < next)); }; then
            next=$epoch
        fi
    done <<<"$rows"
    if ((!found)); then
        end=$(describe_plan EndTime) || return 1
        [[ -n $end && $end != None ]] || return 0
        epoch=$(epoch_of "$end") || {
            log ERROR "DescribeTrainingPlan gave no end time for $FMINFRA_PLAN_ARN (EndTime '$end')"
            return 1
        }
        ((epoch > $(now))) && next=$epoch
    fi
    printf '%s\n' "$next"
}

# resume_if_continued END: for each end this node drained for (its marker) that is not END and has
# passed, or that END (the end ahead now) is later than, the capacity went on: RESUME the node
# (docs/facts/jobs.md#slurm-resume-node), if its Reason is still this script's.
resume_if_continued() {
    local end=$1 marker drained node reason
    for marker in "$STATE_DIR"/plan-drained-*; do
        [[ -f $marker ]] || continue
        drained=${marker##*-}
        [[ $drained =~ ^[0-9]+$ && $drained != "$end" ]] || continue
        if ((drained > $(now))) && { [[ -z $end ]] || ((end < drained)); }; then
            continue # the end drained for is still ahead
        fi
        command -v scontrol >/dev/null || return 0
        node=${FMINFRA_SLURM_NODE_NAME:-$(hostname -s)}
        slurm_node "$node" || {
            log WARN "slurm: could not read the reason of $node; trying again at the next poll"
            return 0
        }
        reason=$SLURM_REASON
        if [[ $reason == "$PLAN_DRAIN_REASON"* ]]; then
            log INFO "slurm: $node is still here after the plan's end $(date -u -d "@$drained" +%Y-%m-%dT%H:%M:%SZ) passed or moved: resuming it"
            scontrol update NodeName="$node" State=RESUME || {
                log WARN "slurm: could not resume $node; trying again at the next poll"
                return 0
            }
        else
            log INFO "slurm: $node was drained for $(date -u -d "@$drained" +%Y-%m-%dT%H:%M:%SZ) but its reason is now '$reason' (not this script's): left as it is"
        fi
        rm -f "$marker"
    done
}

cmd_check() {
    local end reclaim drain_at until marker node
    require_settings
    DRAIN_AT=
    end=$(plan_end) || {
        log WARN "could not read the end of $FMINFRA_PLAN_ARN; trying again at the next poll"
        return 0
    }
    resume_if_continued "$end"
    if [[ -z $end ]]; then
        log INFO "every reserved capacity of $FMINFRA_PLAN_ARN${FMINFRA_INSTANCE_TYPE:+ for $FMINFRA_INSTANCE_TYPE} has ended: nothing to drain for"
        return 0
    fi
    reclaim=$((end - PLAN_TERMINATES_BEFORE_END_S))
    drain_at=$((reclaim - FMINFRA_PLAN_DRAIN_SECONDS))
    marker=$STATE_DIR/plan-drained-$end
    if [[ -f $marker ]]; then
        log INFO "already drained for the plan's end $(date -u -d "@$end" +%Y-%m-%dT%H:%M:%SZ)"
        return 0
    fi
    if (($(now) < drain_at)); then
        DRAIN_AT=$drain_at
        log INFO "plan $FMINFRA_PLAN_ARN ends $(date -u -d "@$end" +%Y-%m-%dT%H:%M:%SZ): drain at $(date -u -d "@$drain_at" +%Y-%m-%dT%H:%M:%SZ)"
        return 0
    fi
    until=$((reclaim - FMINFRA_DRAIN_MARGIN_SECONDS))
    if ! command -v scontrol >/dev/null; then
        # Never recorded as drained: the unit's PATH names /opt/slurm/bin (drain_lib.sh's SERVICE_PATH).
        log ERROR "no scontrol on PATH ($PATH): cannot drain for the plan's end $(date -u -d "@$end" +%Y-%m-%dT%H:%M:%SZ); trying again at the next poll"
        return 1
    fi
    node=${FMINFRA_SLURM_NODE_NAME:-$(hostname -s)}
    if ! slurm_node "$node"; then
        log ERROR "slurm: could not read the state of $node (sinfo): not drained for the plan's end $(date -u -d "@$end" +%Y-%m-%dT%H:%M:%SZ); trying again at the next poll"
        return 1
    fi
    if slurm_held_by_another; then
        log WARN "slurm: $node is $SLURM_STATE for a reason not fminfra's ('$SLURM_REASON'): left as it is, not drained for the plan's end $(date -u -d "@$end" +%Y-%m-%dT%H:%M:%SZ); checked again at the next poll"
        return 0
    fi
    log INFO "plan $FMINFRA_PLAN_ARN ends $(date -u -d "@$end" +%Y-%m-%dT%H:%M:%SZ): draining until $(date -u -d "@$until" +%Y-%m-%dT%H:%M:%SZ)"
    drain_slurm "$until" "${PLAN_DRAIN_REASON#"$FMINFRA_REASON_PREFIX"} $(date -u -d "@$end" +%Y-%m-%dT%H:%M:%SZ)"
    mkdir -p "$STATE_DIR"
    : >"$marker"
}

cmd_watch() {
    local wait
    require_settings
    log INFO "watching the end of $FMINFRA_PLAN_ARN (every ${FMINFRA_PLAN_POLL_SECONDS}s)"
    while :; do
        cmd_check || true
        wait=$FMINFRA_PLAN_POLL_SECONDS
        # Wake for the drain itself, not up to a poll late.
        if [[ -n $DRAIN_AT ]] && ((DRAIN_AT - $(now) < wait)); then
            wait=$((DRAIN_AT - $(now)))
            ((wait > 0)) || wait=1
        fi
        sleep "$wait"
    done
}

cmd_install() {
    require_settings
    install_service "$UNIT" plan-drain.env "fminfra: drain this node before its training plan ends" 30 \
        FMINFRA_PLAN_ARN FMINFRA_INSTANCE_TYPE FMINFRA_PLAN_DRAIN_SECONDS FMINFRA_PLAN_POLL_SECONDS FMINFRA_DRAIN_MARGIN_SECONDS \
        FMINFRA_DRAIN_SIGNAL FMINFRA_DRAIN_POLL_SECONDS FMINFRA_AWS_REGION FMINFRA_SLURM_NODE_NAME
    log INFO "installed $UNIT for $FMINFRA_PLAN_ARN"
}

main() {
    init_logging
    case ${1:-} in
    install) cmd_install ;;
    watch) cmd_watch ;;
    check) cmd_check ;;
    *) usage_error "usage: drain_before_plan_end.sh install|watch|check" ;;
    esac
}

main "$@"
