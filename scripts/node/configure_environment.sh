#!/usr/bin/env bash
# Login shells (/etc/profile.d), systemd services (DefaultEnvironment) and the dynamic linker
# get library paths and the OFI tuner plugin, nothing else: with libfabric >= 1.18 and
# aws-ofi-nccl >= 1.7 no FI_* or NCCL_* tuning variable is needed (no FI_PROVIDER, no
# NCCL_PROTO=simple, no FI_EFA_USE_DEVICE_RDMA, no RDMAV_FORK_SAFE).
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PROFILE=/etc/profile.d/fminfra-gpu.sh
SYSTEMD=/etc/systemd/system.conf.d/fminfra-gpu.conf
LDCONF=/etc/ld.so.conf.d/fminfra-gpu.conf

contents() {
    local cuda plugin_dir
    cuda=/usr/local/cuda-$(ver CUDA_VERSION)
    if [[ -n $(ver_optional AWS_OFI_NCCL_SOURCE_COMMIT) ]]; then
        plugin_dir=/opt/aws-ofi-nccl/lib
    else
        plugin_dir=/opt/amazon/ofi-nccl/lib/$LIB_ARCH-linux-gnu
    fi
    local libs="$cuda/lib64" bins="$cuda/bin" tuner_line="" tuner_env=""
    # Types without EFA get no EFA installer, hence no libfabric, Open MPI or OFI plugin paths.
    if ((TYPE_EFA > 0)); then
        libs+=":/opt/amazon/efa/lib:/opt/amazon/openmpi/lib:$plugin_dir"
        bins+=":/opt/amazon/openmpi/bin:/opt/amazon/efa/bin"
        tuner_line=$'\n'"export NCCL_TUNER_PLUGIN=$plugin_dir/libnccl-ofi-tuner.so"
        tuner_env=" \"NCCL_TUNER_PLUGIN=$plugin_dir/libnccl-ofi-tuner.so\""
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
    contents
    step environment "library paths and OFI tuner for CUDA $(ver CUDA_VERSION), EFA, Open MPI, aws-ofi-nccl" check_environment apply_environment skip
    finish_steps
}

main "$@"
