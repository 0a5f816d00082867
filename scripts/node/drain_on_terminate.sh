#!/usr/bin/env bash
# Drains this node from its scheduler when its Auto Scaling group terminates it, then completes
# the group's termination lifecycle hook, all before EC2 reclaims the Capacity Block.
#
#   drain_on_terminate.sh install   write and start fminfra-drain.service (runs `watch`); bootstrap.sh calls it
#   drain_on_terminate.sh watch     poll the instance's target lifecycle state; drain once it is Terminated
#   drain_on_terminate.sh drain     drain now and complete the hook (by hand, or from `watch`)
#
# The group's hook (`fminfra-drain`, GpuAutoScalingGroup) holds the instance in Terminating:Wait
# for at most FMINFRA_DRAIN_SECONDS. Auto Scaling sets the instance metadata item
# autoscaling/target-lifecycle-state to Terminated when the instance starts to terminate, and the
# node completes the hook with its instance id (docs/facts/capacity.md#lifecycle-hook-target-state-imds).
# The drain:
#   Slurm (scontrol on PATH): the node is set DRAIN (no new jobs), every job on it gets
#     FMINFRA_DRAIN_SIGNAL (USR1; batch script and steps, scancel --full) to checkpoint, the node
#     waits for them; jobs still running at the deadline are ended by setting the node DOWN
#     (docs/facts/jobs.md#slurm-drain-node, #slurm-scancel-signal). A node an operator (or Slurm)
#     already set DRAIN, DOWN or FAIL for a reason of their own keeps its state and Reason (no
#     DRAIN, no DOWN); its jobs still get the signal and the wait, since the instance goes either way.
#   Kubernetes (FMINFRA_DRAIN_KUBECONFIG set): kubectl drain cordons the node and evicts its pods
#     within the time left (docs/facts/eks.md#kubectl-drain).
# The deadline is FMINFRA_DRAIN_BUDGET_SECONDS after the drain starts, and never later than
# FMINFRA_DRAIN_MARGIN_SECONDS before FMINFRA_DRAIN_NOT_AFTER (when EC2 starts reclaiming the block).
#
# Settings (environment; the launch template's user data sets the FMINFRA_DRAIN_* ones):
#   FMINFRA_DRAIN_GROUP, FMINFRA_DRAIN_HOOK   the Auto Scaling group and its hook (required)
#   FMINFRA_DRAIN_SECONDS                     the hook's wait (default 600); heartbeats extend it past 7200
#   FMINFRA_DRAIN_BUDGET_SECONDS              time jobs get (default FMINFRA_DRAIN_SECONDS - 60; half of one under 2 minutes)
#   FMINFRA_DRAIN_NOT_AFTER                   UTC timestamp the drain never passes (optional)
#   FMINFRA_DRAIN_MARGIN_SECONDS              kept before FMINFRA_DRAIN_NOT_AFTER (default 60)
#   FMINFRA_DRAIN_SIGNAL                      signal the jobs get (default USR1)
#   FMINFRA_DRAIN_POLL_SECONDS                poll interval (default 5; a decimal such as 0.5 is taken)
#   FMINFRA_DRAIN_KUBECONFIG                  kubeconfig allowed to cordon this node and evict its pods
#   FMINFRA_SLURM_NODE_NAME, FMINFRA_K8S_NODE_NAME   default: short hostname; the instance's local-hostname
#   FMINFRA_AWS_REGION; lib.sh's FMINFRA_IMDS_URL, FMINFRA_ROOT, FMINFRA_LOG_DIR, FMINFRA_RETRIES
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=drain_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/drain_lib.sh"

FMINFRA_DRAIN_GROUP=${FMINFRA_DRAIN_GROUP:-}
FMINFRA_DRAIN_HOOK=${FMINFRA_DRAIN_HOOK:-}
FMINFRA_DRAIN_SECONDS=${FMINFRA_DRAIN_SECONDS:-600}
FMINFRA_DRAIN_BUDGET_SECONDS=${FMINFRA_DRAIN_BUDGET_SECONDS:-}
FMINFRA_DRAIN_NOT_AFTER=${FMINFRA_DRAIN_NOT_AFTER:-}
FMINFRA_DRAIN_MARGIN_SECONDS=${FMINFRA_DRAIN_MARGIN_SECONDS:-60}
FMINFRA_DRAIN_SIGNAL=${FMINFRA_DRAIN_SIGNAL:-USR1}
FMINFRA_DRAIN_POLL_SECONDS=${FMINFRA_DRAIN_POLL_SECONDS:-5}
FMINFRA_DRAIN_KUBECONFIG=${FMINFRA_DRAIN_KUBECONFIG:-}
FMINFRA_AWS_REGION=${FMINFRA_AWS_REGION:-}
HEARTBEAT_TIMEOUT=
UNIT=fminfra-drain.service
SCRIPT=$NODE_DIR/$(basename "${BASH_SOURCE[0]}")

require_settings() {
    [[ -n $FMINFRA_DRAIN_GROUP && -n $FMINFRA_DRAIN_HOOK ]] ||
        usage_error "FMINFRA_DRAIN_GROUP and FMINFRA_DRAIN_HOOK must be set (the Auto Scaling group and its termination hook)"
    local name
    for name in FMINFRA_DRAIN_SECONDS FMINFRA_DRAIN_MARGIN_SECONDS; do
        [[ ${!name} =~ ^[0-9]+$ ]] || usage_error "$name must be a whole number of seconds, got '${!name}'"
    done
    require_drain_poll
    # The default budget is the one the launch template gets (drain_lib.sh's drain_budget_seconds).
    if [[ -z $FMINFRA_DRAIN_BUDGET_SECONDS ]]; then
        FMINFRA_DRAIN_BUDGET_SECONDS=$(drain_budget_seconds "$FMINFRA_DRAIN_SECONDS")
    fi
    [[ $FMINFRA_DRAIN_BUDGET_SECONDS =~ ^[0-9]+$ ]] ||
        usage_error "FMINFRA_DRAIN_BUDGET_SECONDS must be a whole number of seconds, got '$FMINFRA_DRAIN_BUDGET_SECONDS'"
    # The hook's HeartbeatTimeout: the drain, capped at Auto Scaling's 7200 seconds.
    HEARTBEAT_TIMEOUT=$((FMINFRA_DRAIN_SECONDS > 7200 ? 7200 : FMINFRA_DRAIN_SECONDS))
    if [[ -n $FMINFRA_DRAIN_NOT_AFTER ]]; then
        date -u -d "$FMINFRA_DRAIN_NOT_AFTER" +%s >/dev/null 2>&1 ||
            usage_error "FMINFRA_DRAIN_NOT_AFTER must be a UTC timestamp (2027-01-17T11:00:00Z), got '$FMINFRA_DRAIN_NOT_AFTER'"
    fi
}

aws_autoscaling() {
    retry aws autoscaling "$@" ${FMINFRA_AWS_REGION:+--region "$FMINFRA_AWS_REGION"}
}

# The drain's deadline: the budget from now, and never within the margin of the block's reclaim.
# A reclaim time already passed is the end of a block that was extended after this instance was
# launched (its launch template version carries the old end; docs/facts/capacity.md#capacity-block-extension):
# EC2 has not reclaimed the instance, so the budget alone bounds the drain.
deadline() {
    local by_budget by_block
    by_budget=$(($(now) + FMINFRA_DRAIN_BUDGET_SECONDS))
    if [[ -n $FMINFRA_DRAIN_NOT_AFTER ]]; then
        by_block=$(($(date -u -d "$FMINFRA_DRAIN_NOT_AFTER" +%s) - FMINFRA_DRAIN_MARGIN_SECONDS))
        if ((by_block <= $(now))); then
            log INFO "the block's reclaim at $FMINFRA_DRAIN_NOT_AFTER has passed with this instance running (the block was extended): the drain takes its budget"
        elif ((by_block < by_budget)); then
            by_budget=$by_block
        fi
    fi
    printf '%s\n' "$by_budget"
}

LAST_HEARTBEAT=0
INSTANCE_ID=
drain_tick() { heartbeat_if_due "$INSTANCE_ID"; }
# A drain longer than the hook's timeout keeps the instance in Terminating:Wait with heartbeats.
heartbeat_if_due() {
    local instance_id=$1
    ((FMINFRA_DRAIN_SECONDS > HEARTBEAT_TIMEOUT)) || return 0
    (($(now) - LAST_HEARTBEAT >= HEARTBEAT_TIMEOUT / 2)) || return 0
    if aws_autoscaling record-lifecycle-action-heartbeat --lifecycle-hook-name "$FMINFRA_DRAIN_HOOK" \
        --auto-scaling-group-name "$FMINFRA_DRAIN_GROUP" --instance-id "$instance_id"; then
        LAST_HEARTBEAT=$(now)
    else
        log WARN "could not record a lifecycle heartbeat; the hook ends at its timeout"
    fi
}

cmd_drain() {
    local instance_id until drained=0
    require_settings
    instance_id=$(imds_get instance-id) || die "could not read the instance id from the instance metadata"
    until=$(deadline)
    log INFO "draining $instance_id of $FMINFRA_DRAIN_GROUP until $(date -u -d "@$until" +%Y-%m-%dT%H:%M:%SZ)"
    if command -v scontrol >/dev/null; then
        INSTANCE_ID=$instance_id
        drain_slurm "$until" "instance terminating (Capacity Block end or scale-in)"
        drained=1
    fi
    if [[ -n $FMINFRA_DRAIN_KUBECONFIG ]]; then
        drain_kubernetes "$until"
        drained=1
    fi
    ((drained == 1)) || log WARN "no scheduler on this node (no scontrol, no FMINFRA_DRAIN_KUBECONFIG): nothing to drain"
    aws_autoscaling complete-lifecycle-action --lifecycle-hook-name "$FMINFRA_DRAIN_HOOK" \
        --auto-scaling-group-name "$FMINFRA_DRAIN_GROUP" --instance-id "$instance_id" --lifecycle-action-result CONTINUE ||
        die "could not complete the lifecycle action; Auto Scaling continues at the hook's timeout"
    log INFO "completed $FMINFRA_DRAIN_HOOK for $instance_id: Auto Scaling terminates it now"
}

cmd_watch() {
    local state
    require_settings
    log INFO "watching the target lifecycle state (every ${FMINFRA_DRAIN_POLL_SECONDS}s)"
    while :; do
        state=$(imds_get autoscaling/target-lifecycle-state 2>/dev/null) || state=
        if [[ $state == Terminated ]]; then
            cmd_drain
            return 0
        fi
        sleep "$FMINFRA_DRAIN_POLL_SECONDS"
    done
}

cmd_install() {
    require_settings
    install_service "$UNIT" drain.env "fminfra: drain this node and complete its Auto Scaling termination hook" 5 \
        FMINFRA_DRAIN_GROUP FMINFRA_DRAIN_HOOK FMINFRA_DRAIN_SECONDS FMINFRA_DRAIN_BUDGET_SECONDS \
        FMINFRA_DRAIN_NOT_AFTER FMINFRA_DRAIN_MARGIN_SECONDS FMINFRA_DRAIN_SIGNAL FMINFRA_DRAIN_POLL_SECONDS \
        FMINFRA_DRAIN_KUBECONFIG FMINFRA_AWS_REGION FMINFRA_SLURM_NODE_NAME FMINFRA_K8S_NODE_NAME
    log INFO "installed $UNIT for $FMINFRA_DRAIN_GROUP (hook $FMINFRA_DRAIN_HOOK)"
}

main() {
    init_logging
    case ${1:-} in
    install) cmd_install ;;
    watch) cmd_watch ;;
    drain) cmd_drain ;;
    *) usage_error "usage: drain_on_terminate.sh install|watch|drain" ;;
    esac
}

main "$@"
