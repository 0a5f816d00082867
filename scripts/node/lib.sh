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
#   FMINFRA_KERNEL_RELEASE    the running kernel, default `uname -r` (tests set it)
#   FMINFRA_NCCL_FROM         where jobs get NCCL: host (default: the node must carry it) or
#                             container (HyperPod: the job's image brings it; --verify WARNs
#                             where the node has none, docs/facts/hyperpod.md#hyperpod-nccl-from-container)

set -o errexit -o nounset -o pipefail -o errtrace
shopt -s inherit_errexit extglob

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
FMINFRA_NCCL_FROM=${FMINFRA_NCCL_FROM:-host}
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
    # bash's own clock, in UTC for this printf alone: no `date` process per line
    # (docs/facts/node-software.md#bash-printf-time-format)
    TZ=UTC0 printf -v line '%(%Y-%m-%dT%H:%M:%SZ)T %s %s: %s' -1 "$SCRIPT_NAME" "$level" "$*"
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
    while IFS= read -r line || [[ -n $line ]]; do
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

# One instance metadata item through IMDSv2: a session token first (PUT), then the read carries
# it (docs/facts/network.md#imdsv2-session-token).
imds_get() {
    local token
    token=$(curl --fail --silent --connect-timeout 2 --max-time 5 -X PUT "$FMINFRA_IMDS_URL/latest/api/token" \
        -H "X-aws-ec2-metadata-token-ttl-seconds: 60") || return 1
    curl --fail --silent --connect-timeout 2 --max-time 5 -H "X-aws-ec2-metadata-token: $token" \
        "$FMINFRA_IMDS_URL/latest/meta-data/$1"
}

imds_instance_type() {
    imds_get instance-type
}

# One row of instance_types.tsv into TYPE_* variables; exit 2 naming the known types otherwise.
# fabric: what the type's NVLink fabric needs on the node: fm (Fabric Manager), fm+nvlsm (Fabric
# Manager and the NVLink Subnet Manager), imex (nvidia-imex, no local NVSwitch) or - (nothing).
lookup_instance_type() {
    local name=$1 n gpus efa nvswitch fabric arch fail warn known=""
    while read -r n gpus efa nvswitch fabric arch fail warn || [[ -n $n ]]; do
        [[ -z $n || $n == \#* ]] && continue
        known+="$n "
        if [[ $n == "$name" ]]; then
            [[ $fabric == @(-|fm|fm+nvlsm|imex) ]] ||
                usage_error "$FMINFRA_INSTANCE_TABLE: $name: fabric '$fabric' is not one of -, fm, fm+nvlsm, imex"
            TYPE_GPUS=$gpus TYPE_EFA=$efa TYPE_NVSWITCH=$nvswitch TYPE_FABRIC=$fabric TYPE_ARCH=$arch
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
    dnf)
        # rpm prints "package NAME is not installed" on stdout (exit 1) for a missing package.
        out=$(rpm -q --qf '%{VERSION}-%{RELEASE}' "$1" 2>/dev/null) && printf '%s' "$out"
        ;;
    esac
    return 0
}

# The first of NAME... that is installed, as "NAME VERSION"; nothing when none is.
pkg_first_installed() {
    local name version
    for name in "$@"; do
        version=$(pkg_version "$name")
        if [[ -n $version ]]; then
            printf '%s %s' "$name" "$version"
            return 0
        fi
    done
}

pkg_refresh() {
    case $PKG in
    apt) run retry apt-get -o DPkg::Lock::Timeout=120 -q update ;;
    dnf) run retry dnf -y -q makecache ;;
    esac
}

# Install packages. REPLACING=1 (set by step() when a pinned version replaces an older one that
# fminfra installed, or FMINFRA_ENFORCE_VERSIONS=1) lets apt change packages fminfra held.
REPLACING=0
pkg_install() {
    local -a held=()
    [[ $REPLACING == 1 ]] && held=(--allow-change-held-packages)
    case $PKG in
    apt) run retry apt-get -o DPkg::Lock::Timeout=120 -y -q install --no-install-recommends --allow-downgrades "${held[@]}" "$@" ;;
    dnf) run retry dnf -y -q install "$@" ;;
    esac
}

# NAME=VERSION (apt) or NAME-VERSION (dnf): one exact version.
pkg_spec() {
    if [[ $PKG == apt ]]; then printf '%s=%s' "$1" "$2"; else printf '%s-%s' "$1" "$2"; fi
}

# Every version of NAME the configured repositories offer, one per line (epoch dropped).
# docs/facts/node-software.md#package-version-queries: `apt-cache madison` prints
# "name | version | source" rows; `dnf list --showduplicates` prints "name.arch version repo".
pkg_available_versions() {
    case $PKG in
    apt) apt-cache madison "$1" 2>/dev/null | awk -F'|' '{ gsub(/ /, "", $2); print $2 }' ;;
    dnf) dnf -q list --showduplicates "$1" 2>/dev/null | awk -v n="$1" 'index($1, n ".") == 1 { print $2 }' ;;
    esac | sed 's/^[0-9]*://' | sort -u -V
}

# Exit (one line) unless the repositories offer NAME at exactly VERSION.
require_available() {
    local name=$1 version=$2 offered
    if [[ $DRY_RUN == 1 ]]; then
        printf '      + check the repositories offer %s (else stop with one line)\n' "$(pkg_spec "$name" "$version")"
        return 0
    fi
    offered=$(pkg_available_versions "$name")
    if ! grep -qxF -- "$version" <<<"$offered"; then
        die "$(pkg_spec "$name" "$version") is not in the configured repositories (they offer: $(tr '\n' ' ' <<<"${offered:-nothing}" | sed 's/ $//')); pin a version they offer in $FMINFRA_VERSIONS"
    fi
}

# The newest version of NAME the repositories offer for upstream version PREFIX (PREFIX itself or
# PREFIX-<revision>); exits with one line when there is none.
available_version_for() {
    local name=$1 prefix=$2 found
    if [[ $DRY_RUN == 1 ]]; then
        printf '%s-<revision>' "$prefix"
        return 0
    fi
    found=$(pkg_available_versions "$name" | awk -v p="$prefix" '$0 == p || index($0, p "-") == 1' | tail -n 1)
    [[ -n $found ]] || die "$name at $prefix is not in the configured repositories (they offer: $(pkg_available_versions "$name" | tr '\n' ' ' | sed 's/ $//'))"
    printf '%s' "$found"
}

# Hold packages at their installed versions (apt-mark hold / dnf versionlock), so that a later
# upgrade cannot split the driver from Fabric Manager or move NCCL under nccl-tests.
pkg_hold() {
    case $PKG in
    apt) run apt-mark hold "$@" ;;
    dnf)
        run retry dnf -y -q install 'dnf-command(versionlock)'
        run dnf -q versionlock add "$@"
        ;;
    esac
}

pkg_unhold() {
    case $PKG in
    apt) run apt-mark unhold "$@" ;;
    # dnf exits non-zero when a package has no lock; nothing to undo then.
    dnf) run dnf -q versionlock delete "$@" || true ;;
    esac
}

# The first DIR (a path on the node, without FMINFRA_ROOT) holding a file matching GLOB.
first_dir_with() {
    local glob=$1 dir file
    shift
    for dir in "$@"; do
        for file in "$FMINFRA_ROOT$dir"/$glob; do
            if [[ -e $file ]]; then
                printf '%s' "$dir"
                return 0
            fi
        done
    done
    return 1
}

# Where the dynamic loader finds NAME (a soname such as libnccl.so.2, or libgdrapi.so), as a path on
# the node (without FMINFRA_ROOT) and how it was found, "PATH<TAB>HOW"; nothing when it does not.
# The loader searches LD_LIBRARY_PATH first, then its cache (`ldconfig -p` lists "NAME (flags) =>
# PATH"), so a library on LD_LIBRARY_PATH shadows the cached one (docs/facts/node-software.md#loader-search-order).
loader_resolve() {
    local name=$1 dir path
    local -a dirs=()
    IFS=: read -r -a dirs <<<"${LD_LIBRARY_PATH:-}"
    for dir in "${dirs[@]}"; do
        [[ -n $dir && -e $FMINFRA_ROOT$dir/$name ]] || continue
        printf '%s\tLD_LIBRARY_PATH' "$dir/$name"
        return 0
    done
    path=$(ldconfig -p 2>/dev/null | awk -v n="$name" '$1 == n && $(NF - 1) == "=>" { print $NF; exit }') || path=""
    if [[ -n $path ]]; then
        printf '%s\tldconfig' "$path"
        return 0
    fi
    return 1
}

# The NCCL a program on this node loads, as "VERSION<TAB>PATH<TAB>HOW"; nothing when none is found.
# Where: the loader's answer for libnccl.so.2 (NVIDIA's libnccl2/libnccl packages install it in the
# loader's directories), else the CUDA folders, where the HyperPod and Deep Learning AMIs compile
# NCCL in (/usr/local/cuda-X.Y/lib, docs/facts/hyperpod.md#hyperpod-slurm-ami-contents), the default
# /usr/local/cuda first. The version is the library's own: NCCL embeds "NCCL version X.Y.Z+cudaA.B"
# (docs/facts/node-software.md#nccl-version-string), else the file's name libnccl.so.X.Y.Z.
nccl_found() {
    local found path how dir real version
    if found=$(loader_resolve libnccl.so.2); then
        path=${found%%$'\t'*} how=${found#*$'\t'}
    else
        for dir in /usr/local/cuda/lib /usr/local/cuda/lib64 $(cd "$FMINFRA_ROOT/" && compgen -G 'usr/local/cuda-*/lib*' | sort -r -V); do
            dir=/${dir#/}
            if [[ -e $FMINFRA_ROOT$dir/libnccl.so.2 ]]; then
                path=$dir/libnccl.so.2 how="CUDA folder, not on the loader path"
                break
            fi
        done
    fi
    [[ -n ${path:-} ]] || return 1
    real=$(readlink -f "$FMINFRA_ROOT$path") || real=$FMINFRA_ROOT$path
    version=$(grep -a -o -m 1 'NCCL version [0-9][0-9.]*+cuda[0-9.]*' "$real" 2>/dev/null | head -n 1) || version=""
    version=${version#NCCL version }
    if [[ -z $version && $real =~ libnccl\.so\.([0-9]+\.[0-9]+\.[0-9]+)$ ]]; then version=${BASH_REMATCH[1]}; fi
    printf '%s\t%s\t%s' "${version:-unknown}" "$path" "$how"
}

# Directories of the EFA installer's aws-ofi-nccl plugin: /opt/amazon/ofi-nccl/lib (deb) or lib64
# (rpm) since aws-ofi-nccl 1.17, lib/<arch>-linux-gnu before
# (docs/facts/node-software.md#ofi-nccl-library-layout).
ofi_plugin_dirs() {
    printf '%s\n' /opt/amazon/ofi-nccl/lib /opt/amazon/ofi-nccl/lib64 "/opt/amazon/ofi-nccl/lib/$LIB_ARCH-linux-gnu"
}

# The version of the NVIDIA driver that responds (nvidia-smi), empty when none does.
loaded_driver_version() {
    local version
    version=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null) || version=""
    version=$(head -n 1 <<<"$version")
    [[ $version =~ ^[0-9]+\.[0-9.]+$ ]] && printf '%s' "$version"
    return 0
}

# The CUDA toolkit to build against: the manifest's, or the image's default (/usr/local/cuda) when
# the image carries another version and it was adopted.
cuda_home() {
    if [[ $DRY_RUN == 1 || -d $CUDA_HOME ]]; then printf '%s' "$CUDA_HOME"; else printf '%s' "$FMINFRA_ROOT/usr/local/cuda"; fi
}

# The running kernel; in a plan (which may be for another machine) its placeholder.
kernel_release() {
    if [[ $DRY_RUN == 1 ]]; then
        printf '<uname -r>'
    else
        printf '%s' "${FMINFRA_KERNEL_RELEASE:-$(uname -r)}"
    fi
}

# --- steps --------------------------------------------------------------------------------------

# step NAME STAMP CHECK APPLY [VERIFY_POLICY]
#   CHECK sets CHECK_DETAIL and returns:
#     0  the node has the component at the manifest's version (or, for configuration, as wanted);
#     1  the node lacks it;
#     3  the node has another version: kept as the image's ("adopted") unless fminfra installed
#        the older one (its done-marker says so) or FMINFRA_ENFORCE_VERSIONS=1, then replaced;
#     5  the node has another version that is never replaced in place (the loaded driver): adopted;
#     4  the node has it in a state fminfra does not repair (a Fabric Manager that does not match
#        the loaded driver): install mode stops, verify mode FAILs; nothing is changed.
#   APPLY installs it. VERIFY_POLICY says what --verify makes of a missing component: required
#   (FAIL, the default), optional (WARN: fminfra's own additions an AMI need not carry) or skip.
# --dry-run prints the step and APPLY's commands. --verify runs CHECK only (PASS/WARN/FAIL/SKIP).
# Otherwise the done-marker ($FMINFRA_STATE_DIR/NAME.done) is written last and says what is true:
# STAMP when the node has the manifest's version, "adopted: ..." when it keeps the image's, so a
# bumped pin is installed or reported, never recorded as done.
step() {
    local name=$1 stamp=$2 check=$3 apply=$4 policy=${5:-required} marker rc previous=""
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
        3 | 5) log WARN "WARN $name: $CHECK_DETAIL (manifest: $stamp)" ;;
        *)
            log ERROR "FAIL $name: $CHECK_DETAIL (manifest: $stamp)"
            VERIFY_FAILED=1
            ;;
        esac
        return 0
    fi
    [[ -f $marker ]] && previous=$(<"$marker")
    if ((rc == 0)) && [[ $previous == "$stamp" ]]; then
        log INFO "$name: done-marker matches ($stamp) and the node has it; nothing to do"
        return 0
    fi
    REPLACING=0
    case $rc in
    0) log INFO "$name: the node already has it ($CHECK_DETAIL); not reinstalling" ;;
    4) die "$name: $CHECK_DETAIL; nothing was changed" ;;
    5)
        adopt "$name" "$marker" "$stamp"
        return 0
        ;;
    3)
        if [[ $FMINFRA_ENFORCE_VERSIONS == 1 || (-n $previous && $previous != adopted:*) ]]; then
            REPLACING=1
            log INFO "$name: replacing $CHECK_DETAIL with $stamp ($([[ $FMINFRA_ENFORCE_VERSIONS == 1 ]] && printf 'FMINFRA_ENFORCE_VERSIONS=1' || printf 'fminfra installed the older version'))"
            install_component "$name" "$check" "$apply"
        else
            adopt "$name" "$marker" "$stamp"
            return 0
        fi
        ;;
    *)
        log INFO "$name: installing $stamp (${CHECK_DETAIL:-absent})"
        install_component "$name" "$check" "$apply"
        ;;
    esac
    write_marker "$marker" "$stamp"
    log INFO "$name: done"
}

install_component() {
    local name=$1 check=$2 apply=$3 rc=0
    "$apply"
    "$check" || rc=$?
    ((rc == 0)) || die "$name: installed, but the check still fails: $CHECK_DETAIL"
}

# Keep what the image carries; the marker says so (and is not the manifest's stamp).
adopt() {
    local name=$1 marker=$2 stamp=$3
    log WARN "$name: adopting what the image carries ($CHECK_DETAIL); the manifest's $stamp is NOT installed (FMINFRA_ENFORCE_VERSIONS=1 replaces what can be replaced)"
    write_marker "$marker" "adopted: $CHECK_DETAIL (manifest: $stamp)"
}

write_marker() {
    mkdir -p "$(dirname "$1")"
    printf '%s\n' "$2" >"$1.fminfra-tmp"
    mv "$1.fminfra-tmp" "$1"
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
