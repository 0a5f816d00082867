#!/usr/bin/env bash
# Drains this HyperPod Slurm node before its instance group's SageMaker training plan ends, so
# its jobs can checkpoint before SageMaker starts terminating the plan's instances.
#
#   drain_before_plan_end.sh install   write and start fminfra-plan-drain.service (runs `watch`); on_create.sh calls it
#   drain_before_plan_end.sh watch     read the plan's end (DescribeTrainingPlan) every FMINFRA_PLAN_POLL_SECONDS,
#                                      and drain once, at the plan's end - 30 minutes - the drain
#   drain_before_plan_end.sh check     read the plan's end once; drain if the drain time has come
#
# The end is read again on every poll, so a plan whose end moves is followed. SageMaker begins
# terminating a plan's instances 30 minutes before its end
# (docs/facts/hyperpod.md#training-plan-reserved-capacity-termination); the drain starts
# FMINFRA_PLAN_DRAIN_SECONDS before that and ends, jobs or not, FMINFRA_DRAIN_MARGIN_SECONDS
# before it. The drain is drain_lib.sh's Slurm drain: the node DRAIN, FMINFRA_DRAIN_SIGNAL (USR1)
# to its jobs, then DOWN for jobs still running at the deadline. A node is drained once per plan
# end (a marker under FMINFRA_ROOT/var/lib/fminfra).
#
# Settings (environment; on_create.sh sets them from provisioning_parameters.json's plan_drains):
#   FMINFRA_PLAN_ARN                 the group's training plan (required)
#   FMINFRA_PLAN_DRAIN_SECONDS       how long before the terminations the drain starts (default 600)
#   FMINFRA_PLAN_POLL_SECONDS        how often the plan's end is read (default 300)
#   FMINFRA_DRAIN_MARGIN_SECONDS     kept before the terminations (default 60)
#   FMINFRA_DRAIN_SIGNAL, FMINFRA_DRAIN_POLL_SECONDS, FMINFRA_SLURM_NODE_NAME   as in drain_lib.sh
#   FMINFRA_AWS_REGION; lib.sh's FMINFRA_ROOT, FMINFRA_LOG_DIR, FMINFRA_RETRIES
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=drain_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/drain_lib.sh"

FMINFRA_PLAN_ARN=${FMINFRA_PLAN_ARN:-}
FMINFRA_PLAN_DRAIN_SECONDS=${FMINFRA_PLAN_DRAIN_SECONDS:-600}
FMINFRA_PLAN_POLL_SECONDS=${FMINFRA_PLAN_POLL_SECONDS:-300}
FMINFRA_DRAIN_MARGIN_SECONDS=${FMINFRA_DRAIN_MARGIN_SECONDS:-60}
FMINFRA_AWS_REGION=${FMINFRA_AWS_REGION:-}
# SageMaker's terminations start this long before the plan's end.
PLAN_TERMINATES_BEFORE_END_S=1800
UNIT=fminfra-plan-drain.service
SCRIPT=$NODE_DIR/$(basename "${BASH_SOURCE[0]}")
STATE_DIR=$FMINFRA_ROOT/var/lib/fminfra
# When `check` last found the drain still ahead: the epoch second it starts.
DRAIN_AT=

require_settings() {
    [[ $FMINFRA_PLAN_ARN =~ ^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:[0-9]{12}:training-plan/[a-zA-Z0-9](-*[a-zA-Z0-9]){0,63}$ ]] ||
        usage_error "FMINFRA_PLAN_ARN must be a training plan ARN (arn:aws:sagemaker:REGION:ACCOUNT:training-plan/NAME), got '$FMINFRA_PLAN_ARN'"
    local name
    for name in FMINFRA_PLAN_DRAIN_SECONDS FMINFRA_PLAN_POLL_SECONDS FMINFRA_DRAIN_MARGIN_SECONDS FMINFRA_DRAIN_POLL_SECONDS; do
        [[ ${!name} =~ ^[0-9]+$ ]] || usage_error "$name must be a whole number of seconds, got '${!name}'"
    done
    ((FMINFRA_PLAN_POLL_SECONDS > 0)) || usage_error "FMINFRA_PLAN_POLL_SECONDS must be 1 or more, got 0"
}

# The plan's end in epoch seconds. The CLI prints a timestamp in ISO 8601, or as epoch seconds
# with cli_timestamp_format=wire (docs/facts/hyperpod.md#describe-training-plan-end-time).
plan_end() {
    local end
    end=$(retry aws sagemaker describe-training-plan --training-plan-name "$FMINFRA_PLAN_ARN" \
        --query EndTime --output text ${FMINFRA_AWS_REGION:+--region "$FMINFRA_AWS_REGION"}) ||
        return 1
    if [[ $end =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
        printf '%s\n' "${end%.*}"
    else
        date -u -d "$end" +%s 2>/dev/null || {
            log ERROR "DescribeTrainingPlan gave no end time for $FMINFRA_PLAN_ARN (EndTime '$end')"
            return 1
        }
    fi
}

cmd_check() {
    local end reclaim drain_at until marker
    require_settings
    DRAIN_AT=
    end=$(plan_end) || {
        log WARN "could not read the end of $FMINFRA_PLAN_ARN; trying again at the next poll"
        return 0
    }
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
    log INFO "plan $FMINFRA_PLAN_ARN ends $(date -u -d "@$end" +%Y-%m-%dT%H:%M:%SZ): draining until $(date -u -d "@$until" +%Y-%m-%dT%H:%M:%SZ)"
    if command -v scontrol >/dev/null; then
        drain_slurm "$until" "training plan ends $(date -u -d "@$end" +%Y-%m-%dT%H:%M:%SZ)"
    else
        log WARN "no Slurm on this node (no scontrol): nothing to drain"
    fi
    mkdir -p "$STATE_DIR"
    : >"$marker"
}

cmd_watch() {
    local wait
    require_settings
    log INFO "watching the end of $FMINFRA_PLAN_ARN (every ${FMINFRA_PLAN_POLL_SECONDS}s)"
    while :; do
        cmd_check
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
        FMINFRA_PLAN_ARN FMINFRA_PLAN_DRAIN_SECONDS FMINFRA_PLAN_POLL_SECONDS FMINFRA_DRAIN_MARGIN_SECONDS \
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
