# shellcheck shell=bash
# shellcheck disable=SC2034 # variables set here are read by the scripts that source this file
# Shared by every node script: sourced, never run. Strict mode, logging, the version manifest,
# the target (OS, architecture, instance type), retries, verification and the step runner.
#
# Settings (environment variables, with defaults):
#   FMINFRA_ROOT              prefix for every path the scripts read or write (tests use a fake root)
#   FMINFRA_LOG_DIR           default $FMINFRA_ROOT/var/log/fminfra
#   FMINFRA_STATE_DIR         done-markers, default $FMINFRA_ROOT/var/lib/fminfra
#   FMINFRA_WORK_DIR          downloads and source builds, default $FMINFRA_ROOT/var/tmp/fminfra
#   FMINFRA_VERSIONS          the manifest, default versions.env beside this file
#   FMINFRA_INSTANCE_TABLE    per-type facts, default instance_types.tsv beside this file
#   FMINFRA_RETRIES           attempts per download or package operation, default 5
#   FMINFRA_RETRY_DELAY_S     first back-off, doubled per attempt, default 2
#   FMINFRA_RETRY_MAX_DELAY_S back-off cap, default 60
#   FMINFRA_ALLOW_UNVERIFIED  1: continue (loudly) past a download that cannot be verified
#   FMINFRA_ENFORCE_VERSIONS  1: replace a component the AMI carries at another version
#   FMINFRA_IMDS_URL          instance metadata endpoint, default http://169.254.169.254

set -o errexit -o nounset -o pipefail -o errtrace
shopt -s inherit_errexit

NODE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SCRIPT_NAME=$(basename "$0" .sh)
FMINFRA_ROOT=${FMINFRA_ROOT:-}
FMINFRA_LOG_DIR=${FMINFRA_LOG_DIR:-$FMINFRA_ROOT/var/log/fminfra}
FMINFRA_STATE_DIR=${FMINFRA_STATE_DIR:-$FMINFRA_ROOT/var/lib/fminfra}
FMINFRA_WORK_DIR=${FMINFRA_WORK_DIR:-$FMINFRA_ROOT/var/tmp/fminfra}
FMINFRA_VERSIONS=${FMINFRA_VERSIONS:-$NODE_DIR/versions.env}
FMINFRA_INSTANCE_TABLE=${FMINFRA_INSTANCE_TABLE:-$NODE_DIR/instance_types.tsv}
FMINFRA_RETRIES=${FMINFRA_RETRIES:-5}
FMINFRA_RETRY_DELAY_S=${FMINFRA_RETRY_DELAY_S:-2}
FMINFRA_RETRY_MAX_DELAY_S=${FMINFRA_RETRY_MAX_DELAY_S:-60}
FMINFRA_ALLOW_UNVERIFIED=${FMINFRA_ALLOW_UNVERIFIED:-0}
FMINFRA_ENFORCE_VERSIONS=${FMINFRA_ENFORCE_VERSIONS:-0}
FMINFRA_IMDS_URL=${FMINFRA_IMDS_URL:-http://169.254.169.254}
export DEBIAN_FRONTEND=noninteractive

SUPPORTED_OS="ubuntu-22.04 ubuntu-24.04 al2023"
DRY_RUN=0
VERIFY_ONLY=0
VERIFY_FAILED=0
TARGET_OS=""
TARGET_TYPE=""
LOG_FILE=""
CHECK_DETAIL=""

# --- logging ------------------------------------------------------------------------------------

log() {
    local level=$1
    shift
    local line
    line="$(date -u +%Y-%m-%dT%H:%M:%SZ) ${SCRIPT_NAME} ${level}: $*"
    printf '%s\n' "$line" >&2
    if [[ -n $LOG_FILE ]]; then
        printf '%s\n' "$line" >>"$LOG_FILE" || true
    fi
}

die() {
    log ERROR "$*"
    exit 1
}

usage_error() {
    log ERROR "$*"
    exit 2
}

# Exit status 2 is a usage error that has already said what was wrong.
on_error() {
    [[ $1 == 2 ]] && return 0
    log ERROR "command failed (exit $1) at ${BASH_SOURCE[1]:-?}:$2: $3"
}

trap 'on_error $? $LINENO "$BASH_COMMAND"' ERR

# Logs go to a file only when the script may change the node (not in --dry-run).
init_logging() {
    if [[ $DRY_RUN == 0 ]]; then
        mkdir -p "$FMINFRA_LOG_DIR"
        LOG_FILE=$FMINFRA_LOG_DIR/$SCRIPT_NAME.log
    fi
}

# --- arguments ----------------------------------------------------------------------------------

common_usage() {
    cat <<EOF
usage: $(basename "$0") [--dry-run] [--verify] [--os ubuntu-22.04|ubuntu-24.04|al2023] [--instance-type TYPE]
  --dry-run          print the plan with the manifest's versions; change nothing
  --verify           check what the node carries against the manifest; install nothing
  --os OS            plan for this OS instead of the one in /etc/os-release
  --instance-type T  plan for this type instead of the one in instance metadata (ml. prefix accepted)
EOF
}

parse_common_args() {
    while (($# > 0)); do
        case $1 in
        --dry-run) DRY_RUN=1 ;;
        --verify) VERIFY_ONLY=1 ;;
        --os)
            (($# >= 2)) || usage_error "--os needs a value; supported: ${SUPPORTED_OS}"
            TARGET_OS=$2
            shift
            ;;
        --instance-type)
            (($# >= 2)) || usage_error "--instance-type needs a value"
            TARGET_TYPE=$2
            shift
            ;;
        -h | --help)
            common_usage
            exit 0
            ;;
        *) usage_error "unknown argument '$1'; see --help" ;;
        esac
        shift
    done
}

# The same flags, for passing on to another script.
common_args() {
    local -a args=(--os "$TARGET_OS" --instance-type "$TARGET_TYPE")
    [[ $DRY_RUN == 1 ]] && args+=(--dry-run)
    [[ $VERIFY_ONLY == 1 ]] && args+=(--verify)
    printf '%s\n' "${args[@]}"
}

# --- the version manifest (strict KEY=VALUE, never sourced): manifest.sh, shared with the
# observability scripts; its functions call usage_error above. -------------------------------

# shellcheck source=scripts/node/manifest.sh
source "$NODE_DIR/manifest.sh"

# --- the target: OS, architecture, instance type ------------------------------------------------

os_release_value() {
    local key=$1 file=$FMINFRA_ROOT/etc/os-release line
    [[ -r $file ]] || return 0
    while IFS= read -r line; do
        if [[ $line == "$key="* ]]; then
            line=${line#"$key="}
            line=${line#\"}
            printf '%s' "${line%\"}"
            return 0
        fi
    done <"$file"
}

detect_os() {
    local id version
    id=$(os_release_value ID)
    version=$(os_release_value VERSION_ID)
    case "$id-$version" in
    ubuntu-22.04 | ubuntu-24.04) printf '%s' "$id-$version" ;;
    amzn-2023) printf 'al2023' ;;
    *) usage_error "unsupported OS '${id:-unknown} ${version:-}' (from $FMINFRA_ROOT/etc/os-release); supported: ${SUPPORTED_OS} (or plan for one with --os)" ;;
    esac
}

imds_instance_type() {
    local token
    token=$(curl --fail --silent --connect-timeout 2 --max-time 5 -X PUT "$FMINFRA_IMDS_URL/latest/api/token" \
        -H "X-aws-ec2-metadata-token-ttl-seconds: 60") || return 1
    curl --fail --silent --connect-timeout 2 --max-time 5 -H "X-aws-ec2-metadata-token: $token" \
        "$FMINFRA_IMDS_URL/latest/meta-data/instance-type"
}

# One row of instance_types.tsv into TYPE_* variables; exit 2 naming the known types otherwise.
lookup_instance_type() {
    local name=$1 n gpus efa nvswitch nvlsm arch fail warn known=""
    while read -r n gpus efa nvswitch nvlsm arch fail warn; do
        [[ -z $n || $n == \#* ]] && continue
        known+="$n "
        if [[ $n == "$name" ]]; then
            TYPE_GPUS=$gpus TYPE_EFA=$efa TYPE_NVSWITCH=$nvswitch TYPE_NVLSM=$nvlsm TYPE_ARCH=$arch
            TYPE_NCCL_FAIL_GBPS=$fail TYPE_NCCL_WARN_GBPS=$warn
            return 0
        fi
    done <"$FMINFRA_INSTANCE_TABLE"
    usage_error "instance type '$name' is not in $FMINFRA_INSTANCE_TABLE; known: ${known% }"
}

resolve_target() {
    if [[ -z $TARGET_OS ]]; then
        TARGET_OS=$(detect_os)
    elif [[ " $SUPPORTED_OS " != *" $TARGET_OS "* ]]; then
        usage_error "--os '$TARGET_OS' is not supported; supported: ${SUPPORTED_OS}"
    fi
    case $TARGET_OS in
    ubuntu-22.04) PKG=apt REPO_DISTRO=ubuntu2204 ;;
    ubuntu-24.04) PKG=apt REPO_DISTRO=ubuntu2404 ;;
    al2023) PKG=dnf REPO_DISTRO=amzn2023 ;;
    esac
    if [[ -z $TARGET_TYPE ]]; then
        TARGET_TYPE=$(imds_instance_type) ||
            usage_error "cannot read the instance type from instance metadata ($FMINFRA_IMDS_URL); pass --instance-type"
    fi
    TARGET_TYPE=${TARGET_TYPE#ml.}
    lookup_instance_type "$TARGET_TYPE"
    case $TYPE_ARCH in
    x86_64) REPO_ARCH=x86_64 LIB_ARCH=x86_64 ;;
    arm64) REPO_ARCH=sbsa LIB_ARCH=aarch64 ;;
    *) usage_error "$FMINFRA_INSTANCE_TABLE: $TARGET_TYPE: unknown arch '$TYPE_ARCH'" ;;
    esac
    CUDA_DASHED=$(ver CUDA_VERSION)
    CUDA_DASHED=${CUDA_DASHED//./-}
    CUDA_HOME=$FMINFRA_ROOT/usr/local/cuda-$(ver CUDA_VERSION)
    NVIDIA_REPO_URL=https://developer.download.nvidia.com/compute/cuda/repos/$REPO_DISTRO/$REPO_ARCH
}

# Everything a script needs before its steps: arguments, manifest, target, logging.
node_script_init() {
    parse_common_args "$@"
    load_manifest
    resolve_target
    init_logging
    if [[ $DRY_RUN == 0 && $VERIFY_ONLY == 0 && $FMINFRA_ALLOW_UNVERIFIED == 1 ]]; then
        log WARN "FMINFRA_ALLOW_UNVERIFIED=1: downloads that cannot be verified will be USED ANYWAY"
    fi
}

# --- running commands ---------------------------------------------------------------------------

# A command that changes the node: printed in --dry-run, logged and run otherwise.
run() {
    if [[ $DRY_RUN == 1 ]]; then
        printf '      + %s\n' "$(printf '%q ' "$@")"
        return 0
    fi
    log INFO "run: $*"
    "$@"
}

# Retries with capped exponential back-off.
retry() {
    local attempt=1 delay=$FMINFRA_RETRY_DELAY_S
    while true; do
        if "$@"; then
            return 0
        fi
        if ((attempt >= FMINFRA_RETRIES)); then
            log ERROR "gave up after $attempt attempts: $*"
            return 1
        fi
        log WARN "attempt $attempt/$FMINFRA_RETRIES failed: $*; retrying in ${delay}s"
        sleep "$delay"
        attempt=$((attempt + 1))
        delay=$((delay * 2))
        ((delay <= FMINFRA_RETRY_MAX_DELAY_S)) || delay=$FMINFRA_RETRY_MAX_DELAY_S
    done
}

download() {
    local url=$1 dest=$2
    run retry curl --fail --silent --show-error --location --connect-timeout 10 --output "$dest" "$url"
}

write_file() {
    local path=$1 content=$2
    if [[ $DRY_RUN == 1 ]]; then
        printf '      + write %s:\n' "$path"
        printf '%s\n' "$content" | sed 's/^/          | /'
        return 0
    fi
    mkdir -p "$(dirname "$path")"
    printf '%s\n' "$content" >"$path.fminfra-tmp"
    mv "$path.fminfra-tmp" "$path"
    log INFO "wrote $path"
}

work_dir() {
    local dir=$FMINFRA_WORK_DIR/$1
    if [[ $DRY_RUN == 0 ]]; then
        rm -rf "$dir"
        mkdir -p "$dir"
    fi
    printf '%s' "$dir"
}

# --- verification -------------------------------------------------------------------------------

unverified() {
    if [[ $FMINFRA_ALLOW_UNVERIFIED == 1 ]]; then
        log WARN "!!!!!!!! UNVERIFIED: $*"
        log WARN "!!!!!!!! continuing only because FMINFRA_ALLOW_UNVERIFIED=1"
        return 0
    fi
    die "verification failed: $*; nothing from it was installed (set FMINFRA_ALLOW_UNVERIFIED=1 to accept an unverified download)"
}

# The fingerprint of the (single) primary key in a key file.
key_fingerprint() {
    local key=$1 home=$2
    gpg --homedir "$home" --batch --with-colons --show-keys "$key" 2>/dev/null | awk -F: '$1 == "fpr" { print toupper($10); exit }'
}

# A detached signature by the key pinned by fingerprint. The key file itself is trusted only
# because its fingerprint matches the manifest.
verify_gpg_signature() {
    local file=$1 sig=$2 key=$3 fingerprint=$4 home got status
    home=$(mktemp -d "$FMINFRA_WORK_DIR/gnupg.XXXXXX")
    chmod 700 "$home"
    got=$(key_fingerprint "$key" "$home")
    if [[ $got != "$fingerprint" ]]; then
        rm -rf "$home"
        unverified "$(basename "$key") has fingerprint '${got:-none}', but the manifest pins $fingerprint"
        return 0
    fi
    gpg --homedir "$home" --batch --quiet --import "$key" 2>/dev/null
    status=$(gpg --homedir "$home" --batch --status-fd 1 --verify "$sig" "$file" 2>/dev/null) || true
    rm -rf "$home"
    if awk -v fpr="$fingerprint" '$2 == "VALIDSIG" && ($3 == fpr || $NF == fpr) { found = 1 } END { exit !found }' <<<"$status"; then
        log INFO "good signature on $(basename "$file") by $fingerprint"
    else
        unverified "bad or missing signature on $(basename "$file") (key $fingerprint)"
    fi
}

verify_sha256() {
    local file=$1 expected=$2 got
    [[ -n $expected ]] || return 0
    got=$(sha256sum "$file" | awk '{ print $1 }')
    [[ $got == "$expected" ]] || die "verification failed: sha256 of $(basename "$file") is $got, the manifest pins $expected"
    log INFO "sha256 of $(basename "$file") matches the manifest"
}

# Import a repository signing key after checking its fingerprint; write it as a binary keyring.
install_repo_key() {
    local url=$1 fingerprint=$2 dest=$3 dir home got
    local -a KEY_EXPORT_ARGS=()
    [[ $PKG == dnf ]] && KEY_EXPORT_ARGS=(--armor)
    dir=$(work_dir repo-key)
    download "$url" "$dir/key.pub"
    [[ $DRY_RUN == 1 ]] && {
        printf '      + check fingerprint of %s is %s, then write %s\n' "$(basename "$url")" "$fingerprint" "$dest"
        return 0
    }
    home=$(mktemp -d "$FMINFRA_WORK_DIR/gnupg.XXXXXX")
    chmod 700 "$home"
    got=$(key_fingerprint "$dir/key.pub" "$home")
    if [[ $got != "$fingerprint" ]]; then
        unverified "$(basename "$url") has fingerprint '${got:-none}', but the manifest pins $fingerprint"
    fi
    mkdir -p "$(dirname "$dest")"
    gpg --homedir "$home" --batch --quiet --import "$dir/key.pub" 2>/dev/null
    # Binary keyring for apt's signed-by, armored for rpm's gpgkey.
    gpg --homedir "$home" --batch --yes "${KEY_EXPORT_ARGS[@]}" --export >"$dest.fminfra-tmp"
    mv "$dest.fminfra-tmp" "$dest"
    rm -rf "$home"
    log INFO "installed repository key $fingerprint as $dest"
}

# Fetch exactly one commit of a repository and prove HEAD is that commit.
git_checkout_commit() {
    local url=$1 dir=$2 commit=$3 tag=$4 head
    if [[ -z $commit ]]; then
        [[ $DRY_RUN == 1 ]] && printf '      ! no commit pinned for %s: aborts unless FMINFRA_ALLOW_UNVERIFIED=1\n' "$url"
        [[ $DRY_RUN == 1 ]] || unverified "no commit pinned for $url (tag $tag); pin one in $FMINFRA_VERSIONS"
        run git init --quiet "$dir"
        run retry git -C "$dir" fetch --quiet --depth 1 "$url" "refs/tags/$tag"
    else
        run git init --quiet "$dir"
        run retry git -C "$dir" fetch --quiet --depth 1 "$url" "$commit"
    fi
    run git -C "$dir" -c advice.detachedHead=false checkout --quiet FETCH_HEAD
    [[ $DRY_RUN == 1 ]] && return 0
    head=$(git -C "$dir" rev-parse HEAD)
    if [[ -n $commit && $head != "$commit" ]]; then
        die "verification failed: $url checked out $head, the manifest pins $commit"
    fi
    log INFO "$url at commit $head"
}

# --- packages -----------------------------------------------------------------------------------

# Installed version of a package, empty when absent.
pkg_version() {
    local out
    case $PKG in
    apt)
        out=$(dpkg-query -W -f='${db:Status-Abbrev} ${Version}' "$1" 2>/dev/null) || return 0
        [[ $out == ii* ]] && printf '%s' "${out##* }"
        ;;
    dnf) rpm -q --qf '%{VERSION}-%{RELEASE}' "$1" 2>/dev/null || true ;;
    esac
    return 0
}

pkg_refresh() {
    case $PKG in
    apt) run retry apt-get -o DPkg::Lock::Timeout=120 -q update ;;
    dnf) run retry dnf -y -q makecache ;;
    esac
}

pkg_install() {
    case $PKG in
    apt) run retry apt-get -o DPkg::Lock::Timeout=120 -y -q install --no-install-recommends --allow-downgrades "$@" ;;
    dnf) run retry dnf -y -q install "$@" ;;
    esac
}

# --- steps --------------------------------------------------------------------------------------

# step NAME STAMP CHECK APPLY [VERIFY_POLICY]
#   CHECK returns 0 when the node has the component at the manifest's version, 3 when it has it
#   at another version, 1 when it lacks it; it sets CHECK_DETAIL. APPLY installs it.
#   VERIFY_POLICY says what --verify makes of a missing component: required (FAIL, the default),
#   optional (WARN: fminfra's own additions an AMI need not carry) or skip (not a component).
# --dry-run prints the step and APPLY's commands. --verify runs CHECK only (PASS/WARN/FAIL/SKIP).
# Otherwise: skip when the done-marker holds STAMP; keep what the AMI carries (WARN when the
# version differs, unless FMINFRA_ENFORCE_VERSIONS=1); else APPLY, CHECK again, marker last.
step() {
    local name=$1 stamp=$2 check=$3 apply=$4 policy=${5:-required} marker rc
    marker=$FMINFRA_STATE_DIR/$name.done
    if [[ $DRY_RUN == 1 ]]; then
        printf '  [%s] %s\n' "$name" "$stamp"
        "$apply"
        return 0
    fi
    if [[ $VERIFY_ONLY == 1 && $policy == skip ]]; then
        log INFO "SKIP $name: configuration, not a component; --verify leaves the node as it is"
        return 0
    fi
    CHECK_DETAIL=""
    rc=0
    "$check" || rc=$?
    if [[ $VERIFY_ONLY == 1 ]]; then
        [[ $rc == 1 && $policy == optional ]] && rc=3
        case $rc in
        0) log INFO "PASS $name: $CHECK_DETAIL" ;;
        3) log WARN "WARN $name: $CHECK_DETAIL (manifest: $stamp)" ;;
        *)
            log ERROR "FAIL $name: $CHECK_DETAIL (manifest: $stamp)"
            VERIFY_FAILED=1
            ;;
        esac
        return 0
    fi
    if [[ -f $marker && $(<"$marker") == "$stamp" ]]; then
        log INFO "$name: done-marker matches ($stamp); nothing to do"
        return 0
    fi
    if ((rc == 0)); then
        log INFO "$name: the node already has it ($CHECK_DETAIL); not reinstalling"
    elif ((rc == 3)) && [[ $FMINFRA_ENFORCE_VERSIONS != 1 ]]; then
        log WARN "$name: the node carries another version ($CHECK_DETAIL; manifest: $stamp); keeping it (FMINFRA_ENFORCE_VERSIONS=1 replaces it)"
    else
        log INFO "$name: installing $stamp (${CHECK_DETAIL:-absent})"
        "$apply"
        rc=0
        "$check" || rc=$?
        ((rc == 0)) || die "$name: installed, but the check still fails: $CHECK_DETAIL"
    fi
    mkdir -p "$FMINFRA_STATE_DIR"
    printf '%s\n' "$stamp" >"$marker.fminfra-tmp"
    mv "$marker.fminfra-tmp" "$marker"
    log INFO "$name: done"
}

not_needed() {
    if [[ $DRY_RUN == 1 ]]; then
        printf '  [%s] not needed on %s\n' "$1" "$TARGET_TYPE"
    else
        log INFO "$1: not needed on $TARGET_TYPE"
    fi
}

finish_steps() {
    if [[ $VERIFY_ONLY == 1 && $VERIFY_FAILED == 1 ]]; then
        die "verify: the node lacks components the manifest requires (FAIL lines above)"
    fi
    return 0
}
