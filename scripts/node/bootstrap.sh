#!/usr/bin/env bash
# The one entry point of node set-up: runs every install script in order with the same
# arguments, then the exporters when observability is configured.
#
#   bootstrap.sh [--os OS] [--instance-type TYPE]     install what is missing (user data)
#   bootstrap.sh --verify [--instance-type TYPE]      check what the AMI carries, install nothing
#                                                     (HyperPod lifecycle on_create)
#   bootstrap.sh --dry-run --os OS --instance-type T  print the full plan, change nothing
#
# Every step skips itself when its done-marker matches and the node has the component; a second run
# changes nothing. A component the image carries at another version is adopted and reported, and
# bootstrap.done lists what was adopted, so it never claims the manifest's versions are installed
# when they are not. See lib.sh for the settings (FMINFRA_*) and step() for the rules.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STEPS=(
    install_nvidia_repo.sh
    install_driver.sh
    install_cuda.sh
    install_efa.sh
    install_nccl.sh
    install_gdrcopy.sh
    install_nccl_tests.sh
    configure_environment.sh
)

print_plan_header() {
    local key
    printf 'fminfra node bootstrap plan (dry run: nothing is changed)\n'
    printf '  target: os=%s arch=%s instance-type=%s gpus=%s efa=%s nvswitch=%s fabric=%s\n' \
        "$TARGET_OS" "$TYPE_ARCH" "$TARGET_TYPE" "$TYPE_GPUS" "$TYPE_EFA" "$TYPE_NVSWITCH" "$TYPE_FABRIC"
    printf '  manifest: %s\n' "$FMINFRA_VERSIONS"
    for key in $(printf '%s\n' "${!MANIFEST[@]}" | sort); do
        printf '    %s=%s\n' "$key" "${MANIFEST[$key]}"
    done
    printf '  steps, in order (at run time each is skipped when its done-marker matches or the node already has it):\n'
}

run_exporters() {
    local exporters=$NODE_DIR/../observability/install_exporters.sh
    if [[ -z ${FMINFRA_REMOTE_WRITE_URL:-} ]]; then
        log INFO "SKIP exporters: FMINFRA_REMOTE_WRITE_URL is not set"
    elif [[ ! -f $exporters ]]; then
        log INFO "SKIP exporters: $exporters not found"
    elif [[ $DRY_RUN == 1 ]]; then
        printf '  [exporters] remote write to %s\n' "$FMINFRA_REMOTE_WRITE_URL"
        run bash "$exporters"
    else
        log INFO "exporters: running $exporters"
        bash "$exporters"
    fi
}

# Capacity Block groups: the drain handler that completes the group's termination hook
# (drain_on_terminate.sh; the launch template's user data sets FMINFRA_DRAIN_*).
run_drain_handler() {
    if [[ -z ${FMINFRA_DRAIN_HOOK:-} ]]; then
        log INFO "SKIP drain handler: FMINFRA_DRAIN_HOOK is not set (no termination hook)"
    elif [[ $DRY_RUN == 1 ]]; then
        printf '  [drain] fminfra-drain.service completes hook %s of group %s\n' "$FMINFRA_DRAIN_HOOK" "${FMINFRA_DRAIN_GROUP:-}"
    else
        bash "$NODE_DIR/drain_on_terminate.sh" install
    fi
}

main() {
    node_script_init "$@"
    local -a args
    local script failed=0 manifest_sum adopted
    mapfile -t args < <(common_args)
    [[ $DRY_RUN == 1 ]] && print_plan_header
    [[ $DRY_RUN == 1 ]] || log INFO "bootstrap: os=$TARGET_OS instance-type=$TARGET_TYPE manifest=$FMINFRA_VERSIONS verify=$VERIFY_ONLY"
    for script in "${STEPS[@]}"; do
        if [[ $VERIFY_ONLY == 1 ]]; then
            bash "$NODE_DIR/$script" "${args[@]}" || failed=1
        else
            bash "$NODE_DIR/$script" "${args[@]}"
        fi
    done
    if [[ $VERIFY_ONLY == 1 ]]; then
        ((failed == 0)) || die "verify: FAIL (see the FAIL lines above); nothing was installed"
        log INFO "verify: every component the manifest names is present"
        return 0
    fi
    run_exporters
    run_drain_handler
    [[ $DRY_RUN == 1 ]] && return 0
    manifest_sum=$(sha256sum "$FMINFRA_VERSIONS" | awk '{ print $1 }')
    adopted=$(grep -H '^adopted:' "$FMINFRA_STATE_DIR"/*.done 2>/dev/null | sed "s|^$FMINFRA_STATE_DIR/||; s|\.done:adopted:|: adopted:|" || true)
    if [[ -n $adopted ]]; then
        log WARN "bootstrap: the image's versions were kept for: $(cut -d: -f1 <<<"$adopted" | tr '\n' ' ')(see the WARN lines above)"
    fi
    write_marker "$FMINFRA_STATE_DIR/bootstrap.done" "manifest sha256 $manifest_sum${adopted:+$'\n'$adopted}"
    log INFO "bootstrap: done (run validate.sh to check the node)"
}

main "$@"
