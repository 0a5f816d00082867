#!/usr/bin/env bash
# Writes Prometheus textfile metrics for the node exporter's textfile collector.
#   collect_metrics.sh efa    EFA hw_counters -> node_amazonefa_* (collect_efa.sh beside this
#                             script; served on 9100, job "node")
#   collect_metrics.sh slurm  sinfo/squeue   -> slurm_scrape_success, slurm_nodes_*, slurm_queue_*
#                             (served on 8080, job "slurm")
# Run by systemd timers that install_exporters.sh sets up. The file is written atomically. A failed
# sinfo or squeue writes slurm_scrape_success 0 and no figures (never zeros) and exits 1.
set -o errexit -o nounset -o pipefail

TEXTFILE_DIR=${TEXTFILE_DIR:-/var/lib/fminfra/textfile}

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
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
  local node state seen="" running=0 pending=0 job_state nodes jobs
  # Command substitution, not process substitution: a failing sinfo or squeue is seen here.
  if ! nodes=$(sinfo --noheader --Node --format='%N %T') || ! jobs=$(squeue --noheader --format='%T'); then
    log "sinfo or squeue failed: writing slurm_scrape_success 0 and no figures"
    printf '# HELP slurm_scrape_success 1 if sinfo and squeue answered, 0 if not.\n# TYPE slurm_scrape_success gauge\nslurm_scrape_success 0\n' \
      | write_atomically slurm
    return 1
  fi
  for state in "${SLURM_STATES[@]}"; do count[$state]=0; done
  # One line per node and partition: count each node once.
  while read -r node state; do
    [[ -n $node ]] || continue
    case " $seen " in *" $node "*) continue ;; esac
    seen+=" $node"
    state=$(slurm_state "$state")
    [[ $state == other ]] || count[$state]=$((count[$state] + 1))
  done <<<"$nodes"
  while read -r job_state; do
    case $job_state in
      RUNNING) running=$((running + 1)) ;;
      PENDING) pending=$((pending + 1)) ;;
    esac
  done <<<"$jobs"
  {
    printf '# HELP slurm_scrape_success 1 if sinfo and squeue answered, 0 if not.\n# TYPE slurm_scrape_success gauge\nslurm_scrape_success 1\n'
    for state in "${SLURM_STATES[@]}"; do
      printf '# HELP slurm_nodes_%s Slurm nodes in state %s.\n# TYPE slurm_nodes_%s gauge\nslurm_nodes_%s %s\n' "$state" "$state" "$state" "$state" "${count[$state]}"
    done
    printf '# HELP slurm_queue_running Running jobs.\n# TYPE slurm_queue_running gauge\nslurm_queue_running %s\n' "$running"
    printf '# HELP slurm_queue_pending Pending jobs.\n# TYPE slurm_queue_pending gauge\nslurm_queue_pending %s\n' "$pending"
  } | write_atomically slurm
}

main() {
  case ${1:-} in
    efa) sh "$SCRIPT_DIR/collect_efa.sh" ;;
    slurm) collect_slurm ;;
    *)
      log "usage: collect_metrics.sh efa|slurm"
      return 2
      ;;
  esac
}

main "$@"
