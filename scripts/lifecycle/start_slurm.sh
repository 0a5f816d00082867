#!/usr/bin/env bash
# Starts the Slurm daemon of this node's role once HyperPod has configured Slurm.
#   bash start_slurm.sh controller|compute|login CONTROLLER_ADDRESSES
# CONTROLLER_ADDRESSES: the controller group's IPs, comma-separated (from resource_config.json).
#
# As AWS's reference lifecycle scripts do (docs/facts/hyperpod.md#hyperpod-reference-slurm-start):
#  - wait until HyperPod's agents have written a controller address into slurm.conf (where the node
#    has a slurm.conf; compute and login nodes may have none: they are configless);
#  - controller: slurmctld, and slurmd stays off;
#  - compute and login: slurmd configless, `--conf-server <controller addresses>`, passed through the
#    $SLURMD_OPTIONS the AMI's slurmd.service carries (login nodes run it to fetch slurm.conf into
#    slurmd's cache; they are not Slurm nodes), and slurmctld stays off.
# Where we differ: the controller fails when slurm.conf never names it (the reference goes on after
# 60 s); only $SLURMD_OPTIONS is substituted in the unit (the reference runs envsubst over the whole
# file, which also empties $MAINPID); the unit is edited once and kept as slurmd.service.orig.
set -o errexit -o nounset -o pipefail

ROOT=${FMINFRA_ROOT:-}
SLURM_CONF=${SLURM_CONF:-$ROOT/opt/slurm/etc/slurm.conf}
UNIT_DIR=$ROOT/etc/systemd/system
SLURM_CONF_TIMEOUT=${SLURM_CONF_TIMEOUT:-300}
POLL_INTERVAL=${POLL_INTERVAL:-5}

# bash's own clock in UTC, no `date` process per line (docs/facts/node-software.md#bash-printf-time-format)
log() { TZ=UTC0 printf '%(%Y-%m-%dT%H:%M:%SZ)T start_slurm: %s\n' -1 "$*" >&2; }

if (($# != 2)) || [[ ! $1 =~ ^(controller|compute|login)$ || -z $2 ]]; then
    log "usage: start_slurm.sh controller|compute|login CONTROLLER_ADDRESSES (got: $*)"
    exit 2
fi
role=$1
controllers=$2

# names_a_controller: slurm.conf exists and holds one of the controller addresses (as a whole
# address: 10.0.0.1 is not found in 10.0.0.12).
names_a_controller() {
    local ip
    [[ -f $SLURM_CONF ]] || return 1
    for ip in ${controllers//,/ }; do
        grep -qE -- "(^|[^0-9.])${ip//./\\.}([^0-9.]|\$)" "$SLURM_CONF" && return 0
    done
    return 1
}

wait_for_slurm_conf() {
    local deadline=$((SECONDS + SLURM_CONF_TIMEOUT))
    until names_a_controller; do
        if [[ $role != controller && ! -f $SLURM_CONF ]]; then
            log "no local slurm.conf on this $role node: configless, nothing to wait for"
            return 0
        fi
        if ((SECONDS >= deadline)); then
            if [[ $role == controller ]]; then
                log "$SLURM_CONF does not name the controller ($controllers) after ${SLURM_CONF_TIMEOUT}s; HyperPod has not configured Slurm"
                exit 1
            fi
            log "WARNING: $SLURM_CONF does not name the controller after ${SLURM_CONF_TIMEOUT}s; slurmd fetches its configuration from $controllers"
            return 0
        fi
        sleep "$POLL_INTERVAL"
    done
    log "$SLURM_CONF names the controller"
}

# running UNIT: the daemon is still up after starting (the units are Type=simple: `start` returns
# once the process is forked, so a daemon that exits at once is only seen here).
running() {
    sleep "$POLL_INTERVAL"
    systemctl is-active --quiet "$1" || {
        log "$1 is not running after start; see journalctl -u $1"
        exit 1
    }
}

# unit_present NAME: systemd has a unit file NAME.service.
unit_present() {
    [[ -f $UNIT_DIR/$1.service || -f $ROOT/lib/systemd/system/$1.service || -f $ROOT/usr/lib/systemd/system/$1.service ]]
}

stop_if_present() {
    if unit_present "$1"; then
        systemctl disable --now "$1"
        log "$1 disabled on this $role node"
    fi
}

configure_slurmd() {
    local unit=$UNIT_DIR/slurmd.service
    if [[ ! -f $unit ]]; then
        log "$unit not found: the AMI's Slurm is not where HyperPod puts it"
        exit 1
    fi
    if grep -qF -- "--conf-server $controllers" "$unit"; then
        log "slurmd already points at $controllers"
        return 0
    fi
    if ! grep -qE '\$\{?SLURMD_OPTIONS\}?' "$unit"; then
        log "$unit has no \$SLURMD_OPTIONS to carry --conf-server"
        exit 1
    fi
    [[ -f $unit.orig ]] || cp "$unit" "$unit.orig"
    sed -e "s|\${SLURMD_OPTIONS}|--conf-server $controllers|g" -e "s|\$SLURMD_OPTIONS|--conf-server $controllers|g" "$unit.orig" >"$unit.new"
    mv "$unit.new" "$unit"
    log "slurmd.service: --conf-server $controllers"
}

wait_for_slurm_conf
case $role in
    controller)
        systemctl enable --now slurmctld
        running slurmctld
        stop_if_present slurmd
        ;;
    compute | login)
        configure_slurmd
        systemctl daemon-reload
        systemctl enable --now slurmd
        # Login nodes are not in slurm.conf: their slurmd only fetches the configuration.
        [[ $role == compute ]] && running slurmd
        stop_if_present slurmctld
        ;;
esac
log "$role: Slurm started"
