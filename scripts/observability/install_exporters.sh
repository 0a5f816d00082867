#!/usr/bin/env bash
# Installs the metrics collection of one GPU node (HyperPod Slurm or ec2) and starts it:
#   - node exporter on :9100 (job "node"), with EFA counters through its textfile collector
#     (collect_metrics.sh efa, every scrape interval) when the node has EFA devices;
#   - DCGM exporter on :9400 (job "dcgm") in a Docker container, on nodes with NVIDIA GPUs. It needs
#     the NVIDIA container toolkit's hook, nvidia-container-runtime-hook (it injects the driver
#     libraries and refreshes the image's loader cache; the distroless image has no driver of its
#     own); a node with only the toolkit's base package gets the full package at the same version.
#     Docker is installed from the distribution when the AMI lacks it, as AWS's reference lifecycle
#     scripts install it; without the hook the exporter is not started but its scrape job stays, so
#     ExporterDown reports it; the rest of the install goes on either way (docs/facts/observability.md#dcgm-exporter-distroless-image,
#     docs/facts/observability.md#reference-lifecycle-installs-docker);
#   - on the Slurm controller, the Slurm exporter on :8080 (job "slurm"): a node exporter that
#     serves only the textfile collect_metrics.sh slurm writes from sinfo and squeue;
#   - a Prometheus agent that scrapes them and remote-writes to AMP with SigV4 as the node role.
# The exporter ports are reachable only from the cluster's security group (all traffic to and
# from itself); nothing else opens them.
#
# Settings (environment):
#   FMINFRA_REMOTE_WRITE_URL   required: the AMP workspace's remote-write URL (https://...remote_write)
#   FMINFRA_AWS_REGION         required: the workspace's region (SigV4)
#   FMINFRA_NODE_KIND          worker (default) | controller | login
#   FMINFRA_CLUSTER            cluster label on every series (default: the host name)
#   FMINFRA_SCRAPE_INTERVAL_SECONDS  default 30
# Versions come only from scripts/node/versions.env. Idempotent: a done-marker holding the
# settings' fingerprint is written last; a second run with the same settings does nothing.
set -o errexit -o nounset -o pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
VERSIONS_FILE=${VERSIONS_FILE:-$SCRIPT_DIR/../node/versions.env}
# FMINFRA_ROOT prefixes every system path (tests install into a temporary folder).
ROOT=${FMINFRA_ROOT:-}
INSTALL_DIR=${INSTALL_DIR:-$ROOT/opt/fminfra/observability}
CONFIG_DIR=${CONFIG_DIR:-$ROOT/etc/fminfra/observability}
STATE_DIR=${STATE_DIR:-$ROOT/var/lib/fminfra}
SYSTEMD_DIR=${SYSTEMD_DIR:-$ROOT/etc/systemd/system}
SYSFS_ROOT=${SYSFS_ROOT:-$ROOT/sys}
LOG_FILE=${LOG_FILE:-$ROOT/var/log/fminfra/install_exporters.log}
RETRIES=${RETRIES:-5}
DOWNLOAD_DIR=${DOWNLOAD_DIR:-$STATE_DIR/downloads}
DONE_MARKER=$STATE_DIR/install_exporters.done

log() {
  local line
  line="$(date -u +%Y-%m-%dT%H:%M:%SZ) install_exporters: $*"
  printf '%s\n' "$line" >&2
  printf '%s\n' "$line" >>"$LOG_FILE" 2>/dev/null || true
}

die() {
  log "ERROR: $*"
  exit 1
}

on_error() {
  log "ERROR: line $1: command failed (exit $2): $3"
}
trap 'on_error "$LINENO" "$?" "$BASH_COMMAND"' ERR

usage_error() {
  log "ERROR: $*"
  exit 2
}

# The one strict reader of the version manifest (shared with the node scripts).
# shellcheck source=scripts/node/manifest.sh
source "$SCRIPT_DIR/../node/manifest.sh"

retry() {
  local attempt=1 delay=2
  until "$@"; do
    ((attempt >= RETRIES)) && return 1
    log "retry $attempt/$RETRIES in ${delay}s: $*"
    sleep "$delay"
    attempt=$((attempt + 1))
    delay=$((delay * 2 > 30 ? 30 : delay * 2))
  done
}

go_arch() {
  case $(uname -m) in
    x86_64) echo amd64 ;;
    aarch64) echo arm64 ;;
    *) die "unsupported architecture $(uname -m)" ;;
  esac
}

# Downloads a Prometheus project release and verifies it against the release's sha256sums.txt.
install_release() {
  local project=$1 version=$2 binary=$3 arch name url dir
  arch=$(go_arch)
  name="$project-$version.linux-$arch"
  if [[ -x $INSTALL_DIR/$name/$binary ]]; then
    log "$name already installed"
    return 0
  fi
  url="https://github.com/prometheus/$project/releases/download/v$version"
  mkdir -p "$DOWNLOAD_DIR" "$INSTALL_DIR"
  retry curl --fail --silent --show-error --location --retry 3 -o "$DOWNLOAD_DIR/$name.tar.gz" "$url/$name.tar.gz"
  retry curl --fail --silent --show-error --location --retry 3 -o "$DOWNLOAD_DIR/$name.sha256sums.txt" "$url/sha256sums.txt"
  grep -E "  $name\.tar\.gz\$" "$DOWNLOAD_DIR/$name.sha256sums.txt" >"$DOWNLOAD_DIR/$name.sha256" || die "$name.tar.gz not listed in the release's sha256sums.txt"
  (cd "$DOWNLOAD_DIR" && sha256sum --check --quiet "$name.sha256") || die "$name.tar.gz: checksum mismatch"
  dir=$(mktemp -d "$INSTALL_DIR/.$name.XXXXXX")
  tar -xzf "$DOWNLOAD_DIR/$name.tar.gz" -C "$dir" --strip-components=1
  mv "$dir" "$INSTALL_DIR/$name"
  log "installed $name"
}

write_unit() {
  local name=$1 content=$2
  mkdir -p "$SYSTEMD_DIR"
  printf '%s\n' "$content" >"$SYSTEMD_DIR/$name"
}

# service_unit DESCRIPTION EXEC_START [EXTRA_SERVICE_LINES] [UNIT]: a service started after the
# network and, with UNIT, after and requiring UNIT (the DCGM exporter: docker.service).
service_unit() {
  local description=$1 exec_start=$2 extra=${3:-} needs=${4:-} after="" requires=""
  if [[ -n $needs ]]; then
    after=" $needs"
    requires="Requires=$needs"$'\n'
  fi
  printf '[Unit]\nDescription=%s\nAfter=network-online.target%s\nWants=network-online.target\n%s\n[Service]\n%sExecStart=%s\nRestart=always\nRestartSec=10\n\n[Install]\nWantedBy=multi-user.target\n' \
    "$description" "$after" "$requires" "$extra" "$exec_start"
}

# Docker for the DCGM exporter: the AMI's, else the distribution's package (Ubuntu docker.io,
# Amazon Linux docker). Returns 1 when there is none and it cannot be installed.
ensure_docker() {
  if command -v docker >/dev/null; then
    return 0
  fi
  log "docker not found: installing the distribution's package"
  if command -v apt-get >/dev/null; then
    retry apt-get -y -o DPkg::Lock::Timeout=120 update >/dev/null || return 1
    DEBIAN_FRONTEND=noninteractive retry apt-get -y -o DPkg::Lock::Timeout=120 install docker.io >/dev/null || return 1
  elif command -v dnf >/dev/null; then
    retry dnf -y install docker >/dev/null || return 1
  else
    log "no apt-get or dnf to install docker with"
    return 1
  fi
  systemctl enable --now docker.service >/dev/null || return 1
  command -v docker >/dev/null
}

# Docker registers its NVIDIA GPU driver, which `docker run --gpus` needs, only when
# nvidia-container-runtime-hook is on dockerd's PATH when dockerd starts; the hook is in NVIDIA's
# package nvidia-container-toolkit, not in nvidia-container-toolkit-base, which carries nvidia-ctk
# (docs/facts/observability.md#docker-nvidia-gpu-driver-hook, #nvidia-container-toolkit-packages).
has_container_toolkit() {
  command -v nvidia-container-runtime-hook >/dev/null
}

# The installed version of nvidia-container-toolkit-base, empty when the package is absent.
toolkit_base_version() {
  if command -v dpkg-query >/dev/null; then
    dpkg-query -W -f='${Status} ${Version}\n' nvidia-container-toolkit-base 2>/dev/null | awk '$3 == "installed" {print $4}'
  elif command -v rpm >/dev/null; then
    rpm -q --qf '%{VERSION}-%{RELEASE}\n' nvidia-container-toolkit-base 2>/dev/null | grep -v 'not installed' || true
  fi
}

# The hook for Docker: present, or, on a node with the toolkit's base package only (as AWS's
# reference lifecycle finds HyperPod nodes), the full package at the base package's version from
# the repositories the node has, as the reference installs it
# (docs/facts/observability.md#reference-lifecycle-installs-docker). No version of our own and no
# repository are added. Sets TOOLKIT_INSTALLED=1 when it installed the package; returns 1 when the
# hook is still missing.
TOOLKIT_INSTALLED=0
ensure_container_toolkit() {
  has_container_toolkit && return 0
  local base
  base=$(toolkit_base_version)
  if [[ -z $base ]]; then
    log "no nvidia-container-runtime-hook and no nvidia-container-toolkit-base package"
    return 1
  fi
  log "nvidia-container-toolkit-base $base has no nvidia-container-runtime-hook: installing nvidia-container-toolkit $base"
  if command -v apt-get >/dev/null; then
    retry apt-get -y -o DPkg::Lock::Timeout=120 update >/dev/null || return 1
    DEBIAN_FRONTEND=noninteractive retry apt-get -y -o DPkg::Lock::Timeout=120 install "nvidia-container-toolkit=$base" >/dev/null || return 1
  elif command -v dnf >/dev/null; then
    retry dnf -y install "nvidia-container-toolkit-$base" >/dev/null || return 1
  else
    log "no apt-get or dnf to install nvidia-container-toolkit with"
    return 1
  fi
  TOOLKIT_INSTALLED=1
  has_container_toolkit
}

# The PATH of the metrics timers: Slurm's commands are in /opt/slurm/bin on HyperPod, which
# systemd's default PATH lacks (the reference's Slurm exporter unit sets the same; see
# docs/facts/observability.md#hyperpod-slurm-bin-path).
UNIT_PATH=/opt/slurm/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

timer_units() {
  local name=$1 mode=$2 interval=$3
  write_unit "fminfra-$name-metrics.service" "$(printf '[Unit]\nDescription=fminfra: write %s metrics for the node exporter\n\n[Service]\nType=oneshot\nEnvironment=TEXTFILE_DIR=%s SYSFS_ROOT=%s PATH=%s\nExecStart=%s %s\n' \
    "$mode" "$STATE_DIR/textfile/$name" "$SYSFS_ROOT" "$UNIT_PATH" "$INSTALL_DIR/bin/collect_metrics.sh" "$mode")"
  write_unit "fminfra-$name-metrics.timer" "$(printf '[Unit]\nDescription=fminfra: %s metrics every %ss\n\n[Timer]\nOnBootSec=10s\nOnUnitActiveSec=%ss\nAccuracySec=1s\n\n[Install]\nWantedBy=timers.target\n' \
    "$mode" "$interval" "$interval")"
}

scrape_job() {
  local job=$1 port=$2 instance=$3
  printf '  - job_name: %s\n    static_configs:\n      - targets: ["localhost:%s"]\n        labels:\n          instance: "%s"\n' "$job" "$port" "$instance"
}

render_agent_config() {
  local template=$1 scrape_configs=$2 interval=$3 cluster=$4 out
  out=$(<"$template")
  out=${out//@SCRAPE_CONFIGS@/$scrape_configs}
  out=${out//@SCRAPE_INTERVAL@/${interval}s}
  out=${out//@CLUSTER@/\"$cluster\"}
  out=${out//@REMOTE_WRITE_URL@/$FMINFRA_REMOTE_WRITE_URL}
  out=${out//@REGION@/$FMINFRA_AWS_REGION}
  printf '%s\n' "$out"
}

main() {
  : "${FMINFRA_REMOTE_WRITE_URL:?set FMINFRA_REMOTE_WRITE_URL to the AMP workspace remote-write URL}"
  : "${FMINFRA_AWS_REGION:?set FMINFRA_AWS_REGION to the AMP workspace region}"
  local kind=${FMINFRA_NODE_KIND:-worker}
  local interval=${FMINFRA_SCRAPE_INTERVAL_SECONDS:-30}
  local host cluster fingerprint node_version prom_version dcgm_tag scrape_configs units=() unit
  host=$(hostname)
  cluster=${FMINFRA_CLUSTER:-$host}
  [[ $FMINFRA_REMOTE_WRITE_URL =~ ^https://[^[:space:]\"]+/remote_write$ ]] || die "FMINFRA_REMOTE_WRITE_URL must be https://.../remote_write, got $FMINFRA_REMOTE_WRITE_URL"
  [[ $FMINFRA_AWS_REGION =~ ^[a-z]{2}(-[a-z]+)+-[0-9]$ ]] || die "FMINFRA_AWS_REGION must be a region such as us-west-2, got $FMINFRA_AWS_REGION"
  [[ $kind =~ ^(worker|controller|login)$ ]] || die "FMINFRA_NODE_KIND must be worker, controller or login, got $kind"
  if ! [[ $interval =~ ^[0-9]+$ ]] || ((interval < 5 || interval > 300)); then
    die "FMINFRA_SCRAPE_INTERVAL_SECONDS must be 5 to 300, got $interval"
  fi
  [[ $cluster =~ ^[A-Za-z0-9._-]+$ ]] || die "FMINFRA_CLUSTER must be letters, digits, '.', '_' and '-', got $cluster"
  mkdir -p "$(dirname "$LOG_FILE")" "$STATE_DIR"
  load_manifest "$VERSIONS_FILE"
  node_version=$(ver NODE_EXPORTER_VERSION)
  prom_version=$(ver PROMETHEUS_VERSION)
  dcgm_tag="$(ver DCGM_EXPORTER_VERSION)-distroless"

  fingerprint=$(printf '%s\n' "$FMINFRA_REMOTE_WRITE_URL" "$FMINFRA_AWS_REGION" "$kind" "$interval" "$cluster" "$node_version" "$prom_version" "$dcgm_tag" \
    | cat - "$SCRIPT_DIR/prometheus-agent.yml.tmpl" "$SCRIPT_DIR/collect_metrics.sh" "$SCRIPT_DIR/collect_efa.sh" "$SCRIPT_DIR/dcgm-counters.csv" | sha256sum | cut -d' ' -f1)
  if [[ -f $DONE_MARKER && $(<"$DONE_MARKER") == "$fingerprint" ]]; then
    log "already installed with these settings ($DONE_MARKER)"
    return 0
  fi

  install_release node_exporter "$node_version" node_exporter
  install_release prometheus "$prom_version" prometheus
  mkdir -p "$INSTALL_DIR/bin" "$CONFIG_DIR" "$STATE_DIR/textfile/node" "$STATE_DIR/prometheus-agent"
  install -m 0755 "$SCRIPT_DIR/collect_metrics.sh" "$INSTALL_DIR/bin/collect_metrics.sh"
  install -m 0755 "$SCRIPT_DIR/collect_efa.sh" "$INSTALL_DIR/bin/collect_efa.sh"
  install -m 0644 "$SCRIPT_DIR/dcgm-counters.csv" "$CONFIG_DIR/dcgm-counters.csv"
  local arch node_exporter
  arch=$(go_arch)
  node_exporter="$INSTALL_DIR/node_exporter-$node_version.linux-$arch/node_exporter"

  write_unit fminfra-node-exporter.service "$(service_unit "fminfra: node exporter (:9100)" \
    "$node_exporter --web.listen-address=:9100 --collector.textfile.directory=$STATE_DIR/textfile/node")"
  units+=(fminfra-node-exporter.service)
  scrape_configs=$(scrape_job node 9100 "$host")

  if compgen -G "$SYSFS_ROOT/class/infiniband/*" >/dev/null; then
    timer_units node efa "$interval"
    units+=(fminfra-node-metrics.timer)
    log "EFA devices found: EFA counters every ${interval}s"
  fi

  if command -v nvidia-smi >/dev/null && nvidia-smi --list-gpus >/dev/null 2>&1; then
    # The scrape job stays even when the exporter cannot start: up{job="dcgm"} == 0 raises ExporterDown.
    scrape_configs+=$'\n'$(scrape_job dcgm 9400 "$host")
    if ! ensure_container_toolkit; then
      log "WARNING: NVIDIA GPUs found but Docker's GPU support needs nvidia-container-runtime-hook (package nvidia-container-toolkit), which is missing and could not be installed: the DCGM exporter is not started; install nvidia-container-toolkit and rerun this script"
    elif ! ensure_docker; then
      log "WARNING: NVIDIA GPUs found but docker is missing and could not be installed: the DCGM exporter is not started; install docker and rerun this script"
    else
      local image="nvcr.io/nvidia/k8s/dcgm-exporter:$dcgm_tag" docker_bin
      docker_bin=$(command -v docker)
      if ((TOOLKIT_INSTALLED)); then
        # dockerd looks for the hook only when it starts.
        systemctl restart docker.service
      fi
      retry docker pull --quiet "$image" >/dev/null
      write_unit fminfra-dcgm-exporter.service "$(service_unit "fminfra: DCGM exporter (:9400)" \
        "$docker_bin run --rm --name fminfra-dcgm-exporter --gpus all --cap-add SYS_ADMIN --network host -v $CONFIG_DIR/dcgm-counters.csv:/etc/dcgm-exporter/fminfra-counters.csv:ro $image -f /etc/dcgm-exporter/fminfra-counters.csv -a :9400" \
        "ExecStartPre=-$docker_bin rm -f fminfra-dcgm-exporter"$'\n'"ExecStop=$docker_bin stop fminfra-dcgm-exporter"$'\n' docker.service)"
      units+=(fminfra-dcgm-exporter.service)
    fi
  fi

  if [[ $kind == controller ]]; then
    PATH=$UNIT_PATH:$PATH command -v sinfo >/dev/null || die "FMINFRA_NODE_KIND is controller but sinfo is neither in /opt/slurm/bin nor on PATH"
    mkdir -p "$STATE_DIR/textfile/slurm"
    timer_units slurm slurm "$interval"
    write_unit fminfra-slurm-exporter.service "$(service_unit "fminfra: Slurm exporter (:8080)" \
      "$node_exporter --web.listen-address=:8080 --collector.disable-defaults --collector.textfile --collector.textfile.directory=$STATE_DIR/textfile/slurm")"
    units+=(fminfra-slurm-metrics.timer fminfra-slurm-exporter.service)
    scrape_configs+=$'\n'$(scrape_job slurm 8080 "$host")
  fi

  render_agent_config "$SCRIPT_DIR/prometheus-agent.yml.tmpl" "$scrape_configs" "$interval" "$cluster" >"$CONFIG_DIR/prometheus-agent.yml"
  "$INSTALL_DIR/prometheus-$prom_version.linux-$arch/promtool" check config --agent "$CONFIG_DIR/prometheus-agent.yml" >/dev/null \
    || die "$CONFIG_DIR/prometheus-agent.yml: promtool check config failed"
  write_unit fminfra-prometheus-agent.service "$(service_unit "fminfra: Prometheus agent, remote write to AMP" \
    "$INSTALL_DIR/prometheus-$prom_version.linux-$arch/prometheus --agent --config.file=$CONFIG_DIR/prometheus-agent.yml --storage.agent.path=$STATE_DIR/prometheus-agent --web.listen-address=127.0.0.1:9090")"
  units+=(fminfra-prometheus-agent.service)

  systemctl daemon-reload
  for unit in "${units[@]}"; do
    systemctl enable "$unit" >/dev/null
    systemctl restart "$unit"
  done
  printf '%s\n' "$fingerprint" >"$DONE_MARKER"
  log "started: ${units[*]}"
}

main "$@"
