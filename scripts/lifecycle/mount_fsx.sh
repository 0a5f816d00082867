#!/usr/bin/env bash
# Mounts FSx for Lustre now and records it in fstab so that it comes back after a reboot.
#   bash mount_fsx.sh DNS_NAME MOUNT_NAME MOUNT_PATH
# The fstab entry waits for network-online.target (Ubuntu has no network.service; a Requires= on a
# unit that does not exist fails the mount unit at boot) and is an automount, as in AWS's reference
# lifecycle scripts (docs/facts/hyperpod.md#hyperpod-reference-fsx-fstab). Idempotent.
# Before mounting it waits (DNS_TIMEOUT seconds) until the file system's DNS name resolves: HyperPod's
# agent restarts systemd-resolved while the lifecycle starts, for which AWS's reference sleeps 30 s
# (docs/facts/hyperpod.md#hyperpod-reference-resolved-wait); waiting for the name itself is neither
# too short nor longer than needed.
# FMINFRA_ROOT prefixes every system path (tests run it in a folder).
set -o errexit -o nounset -o pipefail

ROOT=${FMINFRA_ROOT:-}
RETRIES=${RETRIES:-5}
DELAY=${RETRY_DELAY:-5}
DNS_TIMEOUT=${DNS_TIMEOUT:-120}

# bash's own clock in UTC, no `date` process per line (docs/facts/node-software.md#bash-printf-time-format)
log() { TZ=UTC0 printf '%(%Y-%m-%dT%H:%M:%SZ)T mount_fsx: %s\n' -1 "$*" >&2; }

if (($# != 3)) || [[ -z $1 || -z $2 || -z $3 ]]; then
    log "usage: mount_fsx.sh DNS_NAME MOUNT_NAME MOUNT_PATH"
    exit 2
fi
source_spec="$1@tcp:/$2"
mount_path=$3
target=$ROOT$mount_path
fstab=$ROOT/etc/fstab
options="defaults,noatime,flock,_netdev,x-systemd.automount,x-systemd.requires=network-online.target"

mkdir -p "$target" "$(dirname "$fstab")"
touch "$fstab"
entry="$source_spec $mount_path lustre $options 0 0"
if ! grep -qxF "$entry" "$fstab"; then
    # Any older entry for the same mount point (for example one requiring network.service) goes.
    awk -v path="$mount_path" '$1 ~ /^#/ || $2 != path' "$fstab" >"$fstab.new"
    cmp -s "$fstab" "$fstab.new" || log "replaced the old $mount_path entry in $fstab"
    echo "$entry" >>"$fstab.new"
    mv "$fstab.new" "$fstab"
    log "added $mount_path to $fstab"
fi
# systemd turns fstab into mount and automount units when it reloads.
systemctl daemon-reload

dns=$1
waited=0
until getent hosts "$dns" >/dev/null; do
    if ((waited >= DNS_TIMEOUT)); then
        log "$dns does not resolve after ${DNS_TIMEOUT}s (is systemd-resolved up, and does the VPC resolve FSx names?); not mounting"
        exit 1
    fi
    ((waited == 0)) && log "waiting for $dns to resolve (systemd-resolved may be restarting)"
    sleep 1
    waited=$((waited + 1))
done

attempt=1
until mountpoint -q "$target"; do
    if mount -t lustre -o noatime,flock "$source_spec" "$target"; then
        break
    fi
    if ((attempt >= RETRIES)); then
        log "could not mount $source_spec on $mount_path after $attempt attempts"
        exit 1
    fi
    log "mount attempt $attempt failed; retrying in ${DELAY}s"
    sleep "$DELAY"
    attempt=$((attempt + 1))
done
mountpoint -q "$target" || {
    log "$mount_path is not a mount point after mounting $source_spec"
    exit 1
}
log "$source_spec mounted on $mount_path"
