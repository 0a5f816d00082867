#!/usr/bin/env bash
# The NVIDIA driver and what the type's NVLink fabric needs (instance_types.tsv `fabric`):
# Fabric Manager (fm), Fabric Manager and the NVLink Subnet Manager (fm+nvlsm), or nvidia-imex
# (imex). docs/facts/node-software.md#nvlink-fabric-software
#
# Adopt, don't fight, the image: a driver that responds is never replaced in place (whatever its
# branch); Fabric Manager and nvidia-imex must equal the loaded driver's version exactly, so they
# are installed at that version when missing, and a mismatch stops here, changing nothing
# (docs/facts/node-software.md#fabric-manager-matches-driver). A driver is installed (at
# NVIDIA_DRIVER_BRANCH) only when none responds. What is installed is held (apt-mark hold / dnf
# versionlock) so that the driver and its companions move together.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# --- the driver -----------------------------------------------------------------------------------

check_driver() {
    local version module=""
    version=$(loaded_driver_version)
    [[ -r $FMINFRA_ROOT/sys/module/nvidia/version ]] && module=$(<"$FMINFRA_ROOT/sys/module/nvidia/version")
    if [[ -z $version ]]; then
        if [[ -n $module ]]; then
            CHECK_DETAIL="kernel module nvidia $module is loaded but nvidia-smi does not respond (driver/library version mismatch: reboot, or fix the image)"
            return 4
        fi
        CHECK_DETAIL="no NVIDIA driver responds to nvidia-smi"
        return 1
    fi
    if [[ -n $module && $module != "$version" ]]; then
        CHECK_DETAIL="nvidia-smi reports driver $version but the loaded kernel module is $module (reboot, or fix the image)"
        return 4
    fi
    CHECK_DETAIL="driver $version loaded"
    [[ ${version%%.*} == "$BRANCH" ]] && return 0
    CHECK_DETAIL+=" (another branch than the manifest's $BRANCH; a loaded driver is never replaced in place: use an image with the wanted driver)"
    return 5
}

apply_driver() {
    local kernel
    kernel=$(kernel_release)
    if [[ $PKG == apt ]]; then
        # From branch 590 NVIDIA's Ubuntu packages drop the branch from their names and the branch is
        # held by pinning packages (docs/facts/node-software.md#nvidia-ubuntu-590-package-names);
        # that install is not written here.
        ((BRANCH < 590)) || usage_error "$FMINFRA_VERSIONS: NVIDIA_DRIVER_BRANCH=$BRANCH: installing branch 590 or later on Ubuntu is not supported (its packages are renamed); use 580, or an image that carries the driver"
        pkg_install "linux-headers-$kernel" "nvidia-driver-$BRANCH-open"
        pkg_hold "nvidia-driver-$BRANCH-open"
    else
        pkg_install "kernel-devel-$kernel" kernel-modules-extra
        # The dnf module stream holds the branch.
        run retry dnf -y -q module install "nvidia-driver:$BRANCH-open"
    fi
    run modprobe nvidia
}

# --- companions that must equal the loaded driver's version -----------------------------------

# check_companion LABEL PROGRAMS CANDIDATE...: what the node can run is the program (PROGRAMS,
# space-separated paths, any one of which counts), as AWS ParallelCluster's cookbook detects Fabric
# Manager and nvidia-imex (docs/facts/node-software.md#fabric-manager-imex-binaries); a package is
# one way to learn its version. The first installed candidate package must equal the loaded driver.
# A package record without the program is missing; the program without a package is kept, its
# version unknown (5: WARN in --verify, adopted otherwise).
check_companion() {
    local label=$1 programs=$2 found driver program="" p
    shift 2
    for p in $programs; do
        if [[ -x $FMINFRA_ROOT$p ]]; then
            program=$p
            break
        fi
    done
    driver=$(loaded_driver_version)
    found=$(pkg_first_installed "$@")
    if [[ -z $program ]]; then
        if [[ -n $found ]]; then
            CHECK_DETAIL="no ${programs// / or } (package ${found% *} is recorded, but its program is not on the node)"
        else
            CHECK_DETAIL="no $label (${programs// / or }; package $*)"
        fi
        return 1
    fi
    if [[ -z $driver ]]; then
        CHECK_DETAIL="$program ${found:-without a package}; $label without a responding driver"
        return 4
    fi
    if [[ -z $found ]]; then
        CHECK_DETAIL="$program, version unknown (no package records it: $*), driver $driver; kept as the image's"
        return 5
    fi
    CHECK_DETAIL="$found, driver $driver"
    local version=${found#* }
    if [[ $version != "$driver" && $version != "$driver"-* ]]; then
        CHECK_DETAIL+="; $label must be at the driver's version exactly, as NVIDIA requires"
        return 4
    fi
}

# install_companion NAME: NAME at the loaded driver's version, held.
install_companion() {
    local name=$1 driver="<loaded driver version>" version
    [[ $DRY_RUN == 1 ]] || driver=$(loaded_driver_version)
    [[ -n $driver ]] || die "$name: no NVIDIA driver responds, so there is no version to match; install_driver.sh installs one first"
    version=$(available_version_for "$name" "$driver")
    pkg_install "$(pkg_spec "$name" "$version")"
    pkg_hold "$name"
}

# Package names (docs/facts/node-software.md#nvidia-fabric-manager-packages,
# #nvidia-ubuntu-590-package-names, #nvidia-fabric-manager-rpm-name): on apt, NVIDIA's CUDA
# repository names it nvidia-fabricmanager-<branch> up to branch 580 and nvidia-fabricmanager from
# branch 590 on, while Ubuntu's own archive keeps nvidia-fabricmanager-<branch> (595 too); on dnf
# (Amazon Linux 2023) nvidia-fabric-manager before branch 580 and nvidia-fabricmanager from 580
# on. The installed one is found under any of these names; fminfra installs
# the name NVIDIA's repository uses (the repository pin makes NVIDIA's packages come from there) at
# the loaded driver's exact version and holds it: without a branch in the name, an upgrade would
# otherwise move Fabric Manager to the newest branch, away from the driver in use.
fabric_manager_candidates() {
    local branch=""
    # A plan may be for another machine: it names the manifest's branch and reads nothing here.
    [[ $DRY_RUN == 1 ]] || branch=$(loaded_driver_version)
    branch=${branch%%.*}
    branch=${branch:-$BRANCH}
    if [[ $PKG == apt ]] && ((branch >= 590)); then
        printf '%s\n' nvidia-fabricmanager "nvidia-fabricmanager-$branch"
    elif [[ $PKG == apt ]]; then
        printf '%s\n' "nvidia-fabricmanager-$branch" nvidia-fabricmanager
    elif ((branch >= 580)); then
        printf '%s\n' nvidia-fabricmanager nvidia-fabric-manager
    else
        printf '%s\n' nvidia-fabric-manager nvidia-fabricmanager
    fi
}

check_fabric_manager() {
    local -a names
    mapfile -t names < <(fabric_manager_candidates)
    check_companion "Fabric Manager" /usr/bin/nv-fabricmanager "${names[@]}"
}

apply_fabric_manager() {
    local -a names
    mapfile -t names < <(fabric_manager_candidates)
    install_companion "${names[0]}"
    run systemctl enable --now nvidia-fabricmanager.service
}

# NVLink Subnet Manager (Blackwell HGX), as AWS ParallelCluster installs it: its InfiniBand
# dependencies, ib_umad loaded at boot, the nvlsm package held. Fabric Manager starts it.
# docs/facts/node-software.md#nvlsm-install
check_nvlsm() {
    local version
    version=$(pkg_version nvlsm)
    if [[ -n $version ]]; then
        CHECK_DETAIL="nvlsm $version"
    elif [[ -x $FMINFRA_ROOT/opt/nvidia/nvlsm/sbin/nvlsm ]]; then
        CHECK_DETAIL="nvlsm at /opt/nvidia/nvlsm/sbin/nvlsm (no package)"
    else
        CHECK_DETAIL="no nvlsm (package nvlsm, /opt/nvidia/nvlsm/sbin/nvlsm)"
        return 1
    fi
}

apply_nvlsm() {
    if [[ $PKG == apt ]]; then pkg_install infiniband-diags libibumad3; else pkg_install infiniband-diags libibumad; fi
    write_file "$FMINFRA_ROOT/etc/modules-load.d/fminfra-ib-umad.conf" "ib_umad"
    run modprobe ib_umad
    pkg_install nvlsm
    pkg_hold nvlsm
}

# nvidia-imex (GB200): installed at the driver's version and held; the service starts once
# /etc/nvidia-imex/nodes_config.cfg lists the IP addresses of the IMEX domain's nodes, which only
# the cluster knows. docs/facts/node-software.md#nvidia-imex
check_imex() {
    local branch
    branch=$(loaded_driver_version)
    branch=${branch%%.*}
    local rc=0
    check_companion nvidia-imex "/usr/bin/nvidia-imex /usr/bin/nvidia-imex-ctl" "nvidia-imex-${branch:-$BRANCH}" nvidia-imex || rc=$?
    # That IMEX must equal the driver's version is not sourced (unlike Fabric Manager's), and
    # AWS's HyperPod AMI of 2025-08-12 ships IMEX 570.172.08-1 with driver 570.158.01
    # (docs/facts/hyperpod.md#hyperpod-slurm-ami-contents): a loaded driver with another IMEX is
    # reported and kept, never "fixed".
    if ((rc == 4)) && [[ -n $(loaded_driver_version) ]]; then
        CHECK_DETAIL="${CHECK_DETAIL%%; nvidia-imex must be*}; another version than the driver's, kept (the image's pairing)"
        return 5
    fi
    return "$rc"
}

apply_imex() {
    install_companion nvidia-imex
    if [[ -s $FMINFRA_ROOT/etc/nvidia-imex/nodes_config.cfg ]]; then
        run systemctl enable --now nvidia-imex.service
    else
        log WARN "nvidia-imex: installed; /etc/nvidia-imex/nodes_config.cfg must list the IMEX domain's node addresses before nvidia-imex.service can start"
    fi
}

main() {
    node_script_init "$@"
    BRANCH=$(ver NVIDIA_DRIVER_BRANCH)
    step nvidia-driver "NVIDIA driver branch $BRANCH (open kernel modules), only where none responds" check_driver apply_driver
    case $TYPE_FABRIC in
    fm | fm+nvlsm) step fabric-manager "Fabric Manager at the loaded driver's version" check_fabric_manager apply_fabric_manager ;;
    *) not_needed fabric-manager ;;
    esac
    if [[ $TYPE_FABRIC == fm+nvlsm ]]; then
        step nvlsm "NVLink Subnet Manager (nvlsm) for Blackwell HGX" check_nvlsm apply_nvlsm
    else
        not_needed nvlsm
    fi
    if [[ $TYPE_FABRIC == imex ]]; then
        step nvidia-imex "nvidia-imex at the loaded driver's version" check_imex apply_imex
    else
        not_needed nvidia-imex
    fi
    finish_steps
}

main "$@"
