#!/usr/bin/env bash
# The drain both node handlers share (drain_on_terminate.sh at an Auto Scaling scale-in,
# drain_before_plan_end.sh before a training plan ends); source it after lib.sh.
#   drain_slurm UNTIL REASON   the node DRAIN (no new jobs), FMINFRA_DRAIN_SIGNAL to every job on it
#                              (batch script and steps), wait for them until UNTIL (epoch seconds);
#                              jobs still running then are ended by setting the node DOWN
#                              (docs/facts/jobs.md#slurm-drain-node, #slurm-scancel-signal). A node
#                              already out of service for a reason not fminfra's (slurm_held_by_another)
#                              keeps its state: its jobs get the signal and the wait, no DRAIN, no DOWN
#   slurm_node NODE            read NODE's state and Reason into SLURM_STATE and SLURM_REASON
#   slurm_held_by_another      whether that node is drained, draining, down or failing for a Reason
#                              that is not fminfra's (an operator's, or Slurm's own)
#   require_drain_poll         exit 2 unless FMINFRA_DRAIN_POLL_SECONDS is whole or decimal seconds
#                              (5, 0.5: sleep takes a fraction, docs/facts/node-software.md#gnu-sleep-fraction)
#   drain_budget_seconds S     the time jobs get of a drain of S seconds (the default of
#                              drain_on_terminate.sh's FMINFRA_DRAIN_BUDGET_SECONDS)
#   drain_kubernetes UNTIL     kubectl drain of this node with FMINFRA_DRAIN_KUBECONFIG, within the time
#                              left (docs/facts/eks.md#kubectl-drain)
#   install_service UNIT ENV_NAME DESCRIPTION RESTART_S SETTING...   copy $SCRIPT and what it sources
#                              to SERVICE_DIR (the lifecycle or user-data folder it runs from does not
#                              outlive a reboot), write the settings that are set to
#                              FMINFRA_ROOT/etc/fminfra/ENV_NAME and a systemd unit running
#                              "SERVICE_DIR/$SCRIPT watch" with them and PATH=SERVICE_PATH, then enable
#                              and start it
# While it waits, drain_slurm calls `drain_tick` (define it to do something each poll; default none).
FMINFRA_DRAIN_SIGNAL=${FMINFRA_DRAIN_SIGNAL:-USR1}
FMINFRA_DRAIN_POLL_SECONDS=${FMINFRA_DRAIN_POLL_SECONDS:-5}
FMINFRA_DRAIN_KUBECONFIG=${FMINFRA_DRAIN_KUBECONFIG:-}

# Where install_service puts what its units run: a folder that persists across reboots (HyperPod
# runs the lifecycle scripts from /tmp/sagemaker-lifecycle-*, docs/facts/hyperpod.md#hyperpod-lifecycle-scripts-tmp).
SERVICE_DIR=$FMINFRA_ROOT/opt/fminfra/node
# The units' PATH: systemd starts services with a fixed PATH that lacks /opt/slurm/bin, where
# HyperPod's Slurm commands are (docs/facts/hyperpod.md#systemd-service-path,
# docs/facts/observability.md#hyperpod-slurm-bin-path).
SERVICE_PATH=/opt/slurm/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# What a unit's script sources from beside itself (lib.sh, its manifest and tables, this file).
SERVICE_FILES="lib.sh manifest.sh versions.env instance_types.tsv drain_lib.sh"

# Every Slurm Reason these scripts set starts with it: a node whose Reason does was drained by fminfra.
FMINFRA_REASON_PREFIX="fminfra: "
# What slurm_node last read.
SLURM_STATE=
SLURM_REASON=

now() { date -u +%s; }

# The poll is only ever slept (GNU sleep takes a decimal NUMBER: docs/facts/node-software.md#gnu-sleep-fraction),
# so it may be a fraction of a second; deadlines and budgets stay whole seconds. Zero is refused: the
# loops would never pause (instance metadata and squeue asked in a tight loop).
require_drain_poll() {
    [[ $FMINFRA_DRAIN_POLL_SECONDS =~ ^[0-9]+(\.[0-9]+)?$ && $FMINFRA_DRAIN_POLL_SECONDS =~ [1-9] ]] ||
        usage_error "FMINFRA_DRAIN_POLL_SECONDS must be a number of seconds above 0 (5, or a decimal such as 0.5), got '$FMINFRA_DRAIN_POLL_SECONDS'"
}

# The drain less a shutdown margin of a minute, or of half a drain shorter than two minutes
# (rounded down, so the jobs get the odd second): fminfra.capacity.rules.drain_budget_seconds,
# which the launch template's FMINFRA_DRAIN_BUDGET_SECONDS comes from.
drain_budget_seconds() {
    local half=$(($1 / 2))
    printf '%s\n' $(($1 - (half < 60 ? half : 60)))
}

# sinfo prints the node once per partition: its compact state in lower case (drain, drng, down,
# idle, alloc, ...) with a flag suffix (* not responding, $ maintenance, ...), then its Reason in
# full, "none" where it has none (docs/facts/jobs.md#slurm-sinfo-state-reason). SLURM_STATE is the
# state without the suffix.
slurm_node() {
    local line
    line=$(sinfo --noheader --nodes="$1" --format='%t %E') || return 1
    line=${line%%$'\n'*}
    [[ $line == *' '* ]] || return 1
    SLURM_STATE=${line%% *}
    SLURM_STATE=${SLURM_STATE%%[!a-z_]*}
    SLURM_REASON=${line#* }
}

slurm_held_by_another() {
    [[ $SLURM_STATE =~ ^(drain|drng|down|fail|failg)$ && $SLURM_REASON != "$FMINFRA_REASON_PREFIX"* ]]
}

declare -F drain_tick >/dev/null || drain_tick() { :; }

slurm_jobs_on() {
    squeue --noheader --nodelist="$1" --format=%i
}

drain_slurm() {
    local until=$1 reason=$2 node jobs="" listed keep=0
    node=${FMINFRA_SLURM_NODE_NAME:-$(hostname -s)}
    if ! slurm_node "$node"; then
        log WARN "slurm: could not read the state of $node (sinfo); draining it"
    elif slurm_held_by_another; then
        keep=1
    fi
    if ((keep)); then
        log WARN "slurm: $node is $SLURM_STATE for a reason not fminfra's ('$SLURM_REASON'): left as it is (no DRAIN, no DOWN); signalling its jobs with $FMINFRA_DRAIN_SIGNAL"
    else
        log INFO "slurm: draining $node (no new jobs), signalling its jobs with $FMINFRA_DRAIN_SIGNAL"
        scontrol update NodeName="$node" State=DRAIN Reason="$FMINFRA_REASON_PREFIX$reason" ||
            log WARN "slurm: could not set $node DRAIN"
    fi
    scancel --signal="$FMINFRA_DRAIN_SIGNAL" --full --nodelist="$node" || log WARN "slurm: scancel --signal failed"
    # Only an empty list from a squeue that answered means no jobs: a failed squeue (exit 1, e.g.
    # slurmctld not answering: docs/facts/jobs.md#slurm-squeue-exit-status) says nothing about
    # the jobs, so the drain keeps asking until the deadline and then sets the node DOWN.
    while :; do
        if listed=$(slurm_jobs_on "$node"); then
            jobs=$listed
            [[ -n $jobs ]] || break
        else
            log WARN "slurm: squeue failed: the jobs on $node are unknown, asking again"
            jobs="(unknown: squeue failed)"$'\n'
        fi
        (($(now) < until)) || break
        drain_tick
        sleep "$FMINFRA_DRAIN_POLL_SECONDS"
    done
    if [[ -n ${jobs:-} ]] && ((keep)); then
        log WARN "slurm: jobs $(tr '\n' ' ' <<<"$jobs")still on $node at the deadline: left running ($node is not fminfra's to set DOWN)"
    elif [[ -n ${jobs:-} ]]; then
        log WARN "slurm: jobs $(tr '\n' ' ' <<<"$jobs")still on $node at the deadline: setting it DOWN"
        scontrol update NodeName="$node" State=DOWN Reason="$FMINFRA_REASON_PREFIX$reason, drain deadline reached" ||
            log WARN "slurm: could not set $node DOWN"
    else
        log INFO "slurm: $node has no jobs left"
    fi
}

drain_kubernetes() {
    local until=$1 node left
    node=${FMINFRA_K8S_NODE_NAME:-$(imds_get local-hostname)}
    left=$((until - $(now)))
    ((left > 0)) || left=1
    log INFO "kubernetes: draining $node (cordon, then evict its pods within ${left}s)"
    kubectl --kubeconfig "$FMINFRA_DRAIN_KUBECONFIG" drain "$node" --ignore-daemonsets --delete-emptydir-data --force \
        --timeout="${left}s" || log WARN "kubernetes: kubectl drain did not finish (pods may remain on $node)"
}


install_service() {
    local unit=$1 env_file=$FMINFRA_ROOT/etc/fminfra/$2 description=$3 restart=$4 unit_file content name
    shift 4
    unit_file=$FMINFRA_ROOT/etc/systemd/system/$unit
    content="# Written by fminfra $(basename "$SCRIPT"); do not edit."
    for name in "$@"; do
        if [[ -n ${!name:-} ]]; then
            content+=$'\n'"$name=${!name}"
        fi
    done
    mkdir -p "$(dirname "$env_file")" "$(dirname "$unit_file")" "$SERVICE_DIR"
    # An ec2 node's user data unpacks the scripts into /opt/fminfra/node already: nothing to copy.
    if [[ ! $NODE_DIR -ef $SERVICE_DIR ]]; then
        for name in $SERVICE_FILES; do
            install -m 0644 "$NODE_DIR/$name" "$SERVICE_DIR/$name"
        done
        install -m 0755 "$SCRIPT" "$SERVICE_DIR/$(basename "$SCRIPT")"
    fi
    printf '%s\n' "$content" >"$env_file"
    printf '%s\n' "# Written by fminfra $(basename "$SCRIPT"); do not edit.
[Unit]
Description=$description
After=network-online.target
Wants=network-online.target

[Service]
Environment=PATH=$SERVICE_PATH
EnvironmentFile=$env_file
ExecStart=/usr/bin/env bash $SERVICE_DIR/$(basename "$SCRIPT") watch
Restart=on-failure
RestartSec=$restart

[Install]
WantedBy=multi-user.target" >"$unit_file"
    systemctl daemon-reload
    systemctl enable --now "$unit"
}
