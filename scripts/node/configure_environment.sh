#!/usr/bin/env bash
# Login shells (/etc/profile.d), systemd services (DefaultEnvironment) and the dynamic linker get
# library paths, found at run time where the installed packages put them:
#   libfabric   /opt/amazon/efa/lib64 (AL2023) or /opt/amazon/efa/lib (Ubuntu)
#               (docs/facts/node-software.md#efa-install-paths);
#   Open MPI    /opt/amazon/openmpi/lib64 or lib;
#   aws-ofi-nccl /opt/amazon/ofi-nccl/lib (deb) or lib64 (rpm) since 1.17, lib/<arch>-linux-gnu
#               before (docs/facts/node-software.md#ofi-nccl-library-layout), or the source build.
# NCCL_TUNER_PLUGIN is set only for NCCL older than 2.21 with a separate libnccl-ofi-tuner.so:
# NCCL 2.21 and later load the tuner from the net plugin
# (docs/facts/node-software.md#nccl-tuner-from-net-plugin). No FI_* or NCCL_* tuning variable
# (docs/facts/node-software.md#nccl-no-tuning-env-needed).
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PROFILE=/etc/profile.d/fminfra-gpu.sh
SYSTEMD=/etc/systemd/system.conf.d/fminfra-gpu.conf
LDCONF=/etc/ld.so.conf.d/fminfra-gpu.conf

# The first of DIR... holding GLOB; in a plan, the candidates; exits when none does.
found_dir() {
    local what=$1 glob=$2 dir
    shift 2
    if [[ $DRY_RUN == 1 ]]; then
        printf '<first of %s holding %s>' "$*" "$glob"
        return 0
    fi
    dir=$(first_dir_with "$glob" "$@") || die "environment: $what not found ($glob in $*); run the steps before this one"
    printf '%s' "$dir"
}

# The NCCL programs load (lib.sh nccl_found) and its folder where the loader would not search it
# by itself. NCCL compiled into a CUDA folder (the HyperPod AMIs) is found only through
# LD_LIBRARY_PATH, so that folder goes on it; a NCCL the loader finds (a package) goes first when a
# CUDA folder also holds one, since LD_LIBRARY_PATH is searched before the loader's cache and the
# image's own NCCL would shadow the pinned one (docs/facts/node-software.md#loader-search-order).
nccl_paths() {
    local found version path how
    NCCL_LOADED="" NCCL_FIRST_DIR="" NCCL_DIR=""
    found=$(nccl_found) || return 0
    IFS=$'\t' read -r version path how <<<"$found"
    NCCL_LOADED=$version
    if [[ $how == CUDA* || $path == /usr/local/cuda*/lib* ]]; then
        NCCL_DIR=${path%/*}
    elif [[ -e $FMINFRA_ROOT$1/lib/libnccl.so.2 || -e $FMINFRA_ROOT$1/lib64/libnccl.so.2 ]]; then
        NCCL_FIRST_DIR=${path%/*}
    fi
}

contents() {
    local cuda plugin_dir nccl libs bins tuner_line="" tuner_env=""
    local -a ofi_dirs
    # The manifest's CUDA, or the image's default one when the image carries another version.
    cuda=$(cuda_home)
    cuda=${cuda#"$FMINFRA_ROOT"}
    libs="$cuda/lib64"
    bins="$cuda/bin"
    NCCL_LOADED="" NCCL_FIRST_DIR="" NCCL_DIR=""
    [[ $DRY_RUN == 1 ]] || nccl_paths "$cuda"
    [[ -z $NCCL_DIR || :$libs: == *:$NCCL_DIR:* ]] || libs+=":$NCCL_DIR"
    [[ -z $NCCL_FIRST_DIR ]] || libs="$NCCL_FIRST_DIR:$libs"
    # Types without EFA get no EFA installer, hence no libfabric, Open MPI or OFI plugin paths.
    if ((TYPE_EFA > 0)); then
        if [[ -n $(ver_optional AWS_OFI_NCCL_SOURCE_COMMIT) ]]; then
            ofi_dirs=(/opt/aws-ofi-nccl/lib)
        else
            mapfile -t ofi_dirs < <(ofi_plugin_dirs)
        fi
        plugin_dir=$(found_dir "the aws-ofi-nccl plugin" 'libnccl-net*.so' "${ofi_dirs[@]}")
        libs+=":$(found_dir libfabric 'libfabric.so*' /opt/amazon/efa/lib64 /opt/amazon/efa/lib)"
        libs+=":$(found_dir "Open MPI" 'libmpi.so*' /opt/amazon/openmpi/lib64 /opt/amazon/openmpi/lib)"
        libs+=":$plugin_dir"
        bins+=":/opt/amazon/openmpi/bin:/opt/amazon/efa/bin"
        nccl=$NCCL_LOADED
        if [[ -n $nccl && $nccl != unknown && -e $FMINFRA_ROOT$plugin_dir/libnccl-ofi-tuner.so ]] &&
            [[ $(printf '%s\n' "${nccl%%[-+]*}" 2.21 | sort -V | head -n 1) != 2.21 ]]; then
            tuner_line=$'\n'"export NCCL_TUNER_PLUGIN=$plugin_dir/libnccl-ofi-tuner.so"
            tuner_env=" \"NCCL_TUNER_PLUGIN=$plugin_dir/libnccl-ofi-tuner.so\""
        fi
    fi
    # shellcheck disable=SC2016 # $PATH and $LD_LIBRARY_PATH expand in the login shell, not here.
    PROFILE_CONTENT='# Written by fminfra configure_environment.sh; do not edit.
export PATH='"$bins"':$PATH
export LD_LIBRARY_PATH='"$libs"'${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}'"$tuner_line"
    SYSTEMD_CONTENT="# Written by fminfra configure_environment.sh; do not edit.
[Manager]
DefaultEnvironment=\"LD_LIBRARY_PATH=$libs\"$tuner_env"
    LDCONF_CONTENT="# Written by fminfra configure_environment.sh; do not edit.
${libs//:/$'\n'}"
}

check_environment() {
    CHECK_DETAIL="$PROFILE, $SYSTEMD, $LDCONF"
    [[ -f $FMINFRA_ROOT$PROFILE && $(<"$FMINFRA_ROOT$PROFILE") == "$PROFILE_CONTENT" ]] || return 1
    [[ -f $FMINFRA_ROOT$SYSTEMD && $(<"$FMINFRA_ROOT$SYSTEMD") == "$SYSTEMD_CONTENT" ]] || return 1
    [[ -f $FMINFRA_ROOT$LDCONF && $(<"$FMINFRA_ROOT$LDCONF") == "$LDCONF_CONTENT" ]] || return 1
}

apply_environment() {
    write_file "$FMINFRA_ROOT$PROFILE" "$PROFILE_CONTENT"
    write_file "$FMINFRA_ROOT$SYSTEMD" "$SYSTEMD_CONTENT"
    write_file "$FMINFRA_ROOT$LDCONF" "$LDCONF_CONTENT"
    run ldconfig
    run systemctl daemon-reload
}

main() {
    node_script_init "$@"
    # --verify leaves configuration alone (the step is skipped), so nothing needs finding.
    [[ $VERIFY_ONLY == 1 ]] || contents
    step environment "library paths for CUDA, EFA, Open MPI and aws-ofi-nccl as installed" check_environment apply_environment skip
    finish_steps
}

main "$@"
