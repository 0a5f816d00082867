#!/bin/sh
# Writes the EFA device's hardware counters as node_amazonefa_* metrics for the node exporter's
# textfile collector (served on 9100, job "node"), atomically, into $TEXTFILE_DIR/efa.prom.
#   collect_efa.sh              one collection (Slurm and ec2 nodes: a systemd timer runs it)
#   collect_efa.sh --every N    a collection every N seconds, forever (the EKS node exporter pod's
#                               sidecar, in the node exporter image: busybox sh)
# POSIX sh on purpose: it runs under bash on the nodes and under busybox sh in that image.
# The EFA driver keeps its counters at two levels (docs/facts/observability.md#efa-hw-counters-sysfs):
#   device: /sys/class/infiniband/<device>/hw_counters/<name>               -> {device}
#   port:   /sys/class/infiniband/<device>/ports/<port>/hw_counters/<name>  -> {device, port}
# A counter that a driver version lacks is left out (its HELP and TYPE lines stay).
set -eu

SYSFS_ROOT=${SYSFS_ROOT:-/sys}
TEXTFILE_DIR=${TEXTFILE_DIR:-/var/lib/fminfra/textfile}

DEVICE_COUNTERS="cmds_err no_completion_cmds"
PORT_COUNTERS="rx_bytes tx_bytes rx_pkts tx_pkts rx_drops rdma_read_bytes rdma_write_bytes rdma_read_wr_err rdma_write_wr_err retrans_bytes retrans_pkts retrans_timeout_events unresponsive_remote_events impaired_remote_conn_events"

# sample NAME LABELS FILE: one sample line when FILE holds a non-negative integer.
sample() {
  [ -r "$3" ] || return 0
  value=""
  read -r value <"$3" || [ -n "$value" ] || return 0
  case $value in
    '' | *[!0-9]*) return 0 ;;
  esac
  printf 'node_amazonefa_%s{%s} %s\n' "$1" "$2" "$value"
}

header() {
  printf '# HELP node_amazonefa_%s EFA hw_counter %s (%s level).\n# TYPE node_amazonefa_%s counter\n' "$1" "$1" "$2" "$1"
}

metrics() {
  printf '# HELP node_amazonefa_info EFA device present, always 1.\n# TYPE node_amazonefa_info gauge\n'
  for device in "$SYSFS_ROOT"/class/infiniband/*; do
    [ -d "$device" ] || continue
    printf 'node_amazonefa_info{device="%s"} 1\n' "${device##*/}"
  done
  for counter in $DEVICE_COUNTERS; do
    header "$counter" device
    for device in "$SYSFS_ROOT"/class/infiniband/*; do
      [ -d "$device" ] || continue
      sample "$counter" "device=\"${device##*/}\"" "$device/hw_counters/$counter"
    done
  done
  for counter in $PORT_COUNTERS; do
    header "$counter" port
    for file in "$SYSFS_ROOT"/class/infiniband/*/ports/*/hw_counters/"$counter"; do
      [ -r "$file" ] || continue
      port=${file%/hw_counters/*}
      device=${port%/ports/*}
      sample "$counter" "device=\"${device##*/}\",port=\"${port##*/}\"" "$file"
    done
  done
}

collect() {
  mkdir -p "$TEXTFILE_DIR"
  tmp=$(mktemp "$TEXTFILE_DIR/.efa.XXXXXX")
  metrics >"$tmp"
  chmod 0644 "$tmp"
  mv -f "$tmp" "$TEXTFILE_DIR/efa.prom"
}

case ${1:-} in
  "") collect ;;
  --every)
    interval=${2:-}
    case $interval in
      '' | *[!0-9]* | 0)
        echo "collect_efa.sh: --every takes a number of seconds, got '$interval'" >&2
        exit 2
        ;;
    esac
    while :; do
      collect || echo "collect_efa.sh: collection failed" >&2
      sleep "$interval"
    done
    ;;
  *)
    echo "usage: collect_efa.sh [--every SECONDS]" >&2
    exit 2
    ;;
esac
