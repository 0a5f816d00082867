#!/usr/bin/env bash
# Writes Prometheus textfile metrics for the node exporter's textfile collector.
#   collect_metrics.sh efa    EFA hw_counters -> node_amazonefa_* (served on 9100, job "node")
#   collect_metrics.sh slurm  sinfo/squeue   -> slurm_nodes_*, slurm_queue_* (served on 8080, job "slurm")
# Run by systemd timers that install_exporters.sh sets up. The file is written atomically.
set -o errexit -o nounset -o pipefail

SYSFS_ROOT=${SYSFS_ROOT:-/sys}
TEXTFILE_DIR=${TEXTFILE_DIR:-/var/lib/fminfra/textfile}

# The EFA counters exported, as the amazonefa collector names them.
EFA_COUNTERS=(rx_bytes tx_bytes rx_pkts tx_pkts rx_drops rdma_read_bytes rdma_write_bytes rdma_read_wr_err rdma_write_wr_err cmds_err)
SLURM_STATES=(alloc comp down drain fail idle maint mix resv)

log() { printf '%s collect_metrics: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }

write_atomically() {
  local name=$1 tmp
  mkdir -p "$TEXTFILE_DIR"
  tmp=$(mktemp "$TEXTFILE_DIR/.$name.XXXXXX")
  cat >"$tmp"
  chmod 0644 "$tmp"
  mv -f "$tmp" "$TEXTFILE_DIR/$name.prom"
}

collect_efa() {
  local device port counter file value dev_name port_name
  {
    printf '# HELP node_amazonefa_info EFA device present, always 1.\n# TYPE node_amazonefa_info gauge\n'
    for device in "$SYSFS_ROOT"/class/infiniband/*; do
      [[ -d $device ]] || continue
      printf 'node_amazonefa_info{device="%s"} 1\n' "${device##*/}"
    done
    for counter in "${EFA_COUNTERS[@]}"; do
      printf '# HELP node_amazonefa_%s EFA hw_counter %s.\n# TYPE node_amazonefa_%s counter\n' "$counter" "$counter" "$counter"
      for file in "$SYSFS_ROOT"/class/infiniband/*/ports/*/hw_counters/"$counter"; do
        [[ -r $file ]] || continue
        value=$(<"$file")
        [[ $value =~ ^[0-9]+$ ]] || continue
        port=${file%/hw_counters/*}
        port_name=${port##*/}
        dev_name=${port%/ports/*}
        dev_name=${dev_name##*/}
        printf 'node_amazonefa_%s{device="%s",port="%s"} %s\n' "$counter" "$dev_name" "$port_name" "$value"
      done
    done
  } | write_atomically efa
}

# sinfo's long state names (with flag suffixes such as * ~ # $ @ + % ! ^ - removed) -> exporter state.
slurm_state() {
  case ${1%%[^a-z]*} in
    allocated) echo alloc ;;
    completing) echo comp ;;
    down) echo down ;;
    drained | draining) echo drain ;;
    fail | failing) echo fail ;;
    idle) echo idle ;;
    maint) echo maint ;;
    mixed) echo mix ;;
    reserved) echo resv ;;
    *) echo other ;;
  esac
}

collect_slurm() {
  local -A count=()
  local node state seen="" running=0 pending=0 job_state
  for state in "${SLURM_STATES[@]}"; do count[$state]=0; done
  # One line per node and partition: count each node once.
  while read -r node state; do
    [[ -n $node ]] || continue
    case " $seen " in *" $node "*) continue ;; esac
    seen+=" $node"
    state=$(slurm_state "$state")
    [[ $state == other ]] || count[$state]=$((count[$state] + 1))
  done < <(sinfo --noheader --Node --format='%N %T')
  while read -r job_state; do
    case $job_state in
      RUNNING) running=$((running + 1)) ;;
      PENDING) pending=$((pending + 1)) ;;
    esac
  done < <(squeue --noheader --format='%T')
  {
    for state in "${SLURM_STATES[@]}"; do
      printf '# HELP slurm_nodes_%s Slurm nodes in state %s.\n# TYPE slurm_nodes_%s gauge\nslurm_nodes_%s %s\n' "$state" "$state" "$state" "$state" "${count[$state]}"
    done
    printf '# HELP slurm_queue_running Running jobs.\n# TYPE slurm_queue_running gauge\nslurm_queue_running %s\n' "$running"
    printf '# HELP slurm_queue_pending Pending jobs.\n# TYPE slurm_queue_pending gauge\nslurm_queue_pending %s\n' "$pending"
  } | write_atomically slurm
}

main() {
  case ${1:-} in
    efa) collect_efa ;;
    slurm) collect_slurm ;;
    *)
      log "usage: collect_metrics.sh efa|slurm"
      return 2
      ;;
  esac
}

main "$@"
