#!/usr/bin/env bash
# GDRCopy GDRCOPY_VERSION, built from github.com/NVIDIA/gdrcopy at the pinned GDRCOPY_COMMIT, unless
# the image already carries it whole. "Whole" is what aws-ofi-nccl needs
# (docs/facts/node-software.md#gdrcopy-loader-and-module):
#   - the unversioned libgdrapi.so where the loader finds it (aws-ofi-nccl dlopen()s "libgdrapi.so"):
#     LD_LIBRARY_PATH or `ldconfig -p`, wherever the image put it (packages, or /opt/gdrcopy);
#   - the gdrdrv kernel module built for the running kernel, or loaded;
#   - gdrdrv loaded again after a reboot: GDRCopy's DKMS package, or fminfra's unit
#     fminfra-gdrdrv.service (modprobe and the /dev/gdrdrv node, as GDRCopy's insmod.sh does).
# The done-marker names the kernel: after a kernel update the module is rebuilt on the next run.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PREFIX=/opt/gdrcopy
LDCONF=/etc/ld.so.conf.d/fminfra-gdrcopy.conf
UNIT=/etc/systemd/system/fminfra-gdrdrv.service
LOADER=/opt/gdrcopy/sbin/fminfra-gdrdrv-load

# gdrdrv built for the running kernel (any folder under /lib/modules/<kernel>: extra/ from
# drv_install, updates/dkms/ from DKMS), or already loaded (/sys/module/gdrdrv).
module_present() {
    local found
    [[ -d $FMINFRA_ROOT/sys/module/gdrdrv ]] && return 0
    found=$(find "$FMINFRA_ROOT/lib/modules/$KERNEL" -name 'gdrdrv.ko*' -print -quit 2>/dev/null || true)
    [[ -n $found ]]
}

loads_at_boot() {
    [[ -n $(pkg_first_installed gdrdrv-dkms gdrcopy-kmod) || -f $FMINFRA_ROOT$UNIT ]]
}

check_gdrcopy() {
    local -a missing=()
    local found version
    loader_resolve libgdrapi.so >/dev/null || missing+=("libgdrapi.so on the loader path (LD_LIBRARY_PATH, ldconfig -p)")
    module_present || missing+=("gdrdrv for kernel $KERNEL")
    loads_at_boot || missing+=("gdrdrv loading at boot (DKMS package or $UNIT)")
    if [[ -f $FMINFRA_ROOT$PREFIX/.fminfra-stamp && $(<"$FMINFRA_ROOT$PREFIX/.fminfra-stamp") == "$STAMP" ]]; then
        found="gdrcopy built by fminfra ($STAMP)"
        version=$GDRCOPY_VERSION
    else
        found=$(pkg_first_installed gdrcopy libgdrapi)
        version=${found#* }
        [[ -n $found ]] && found="gdrcopy package ${found}" || found="no gdrcopy build or package"
    fi
    if ((${#missing[@]} > 0)); then
        CHECK_DETAIL="$found; missing: $(printf '%s, ' "${missing[@]}" | sed 's/, $//')"
        return 1
    fi
    CHECK_DETAIL="$found; libgdrapi.so on the loader path, gdrdrv for kernel $KERNEL, loaded at boot"
    [[ $version == "$GDRCOPY_VERSION" || $version == "$GDRCOPY_VERSION"-* ]] || return 3
}

apply_gdrcopy() {
    local src prefix=$FMINFRA_ROOT$PREFIX
    src=$(work_dir gdrcopy)
    if [[ $PKG == apt ]]; then pkg_install build-essential pkg-config git "linux-headers-$KERNEL"; else pkg_install gcc gcc-c++ make pkgconf git "kernel-devel-$KERNEL"; fi
    git_checkout_commit https://github.com/NVIDIA/gdrcopy.git "$src" "$GDRCOPY_COMMIT" "v$GDRCOPY_VERSION"
    # lib_install installs libgdrapi.so.<ver> with the .so.<major> and unversioned .so links.
    run make -C "$src" prefix="$prefix" CUDA="$(cuda_home)" lib lib_install
    write_file "$FMINFRA_ROOT$LDCONF" "$PREFIX/lib"
    run ldconfig
    if [[ $DRY_RUN == 1 ]] || ! module_present; then
        # drv_install copies gdrdrv.ko into /lib/modules/<kernel> and runs depmod.
        run make -C "$src" CUDA="$(cuda_home)" driver drv_install
    fi
    if [[ $DRY_RUN == 1 || -z $(pkg_first_installed gdrdrv-dkms gdrcopy-kmod) ]]; then
        write_file "$FMINFRA_ROOT$LOADER" "#!/bin/sh
# Written by fminfra install_gdrcopy.sh: load gdrdrv and create /dev/gdrdrv (as GDRCopy's insmod.sh does).
set -e
modprobe gdrdrv dbg_enabled=0 info_enabled=0 use_persistent_mapping=1
major=\$(awk '\$2 == \"gdrdrv\" { print \$1 }' /proc/devices)
[ -c /dev/gdrdrv ] || mknod /dev/gdrdrv c \"\$major\" 0
chmod a+w+r /dev/gdrdrv"
        run chmod 0755 "$FMINFRA_ROOT$LOADER"
        write_file "$FMINFRA_ROOT$UNIT" "# Written by fminfra install_gdrcopy.sh; do not edit.
[Unit]
Description=Load the GDRCopy kernel module gdrdrv (fminfra)
After=systemd-modules-load.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=$LOADER

[Install]
WantedBy=multi-user.target"
        run systemctl daemon-reload
        run systemctl enable --now fminfra-gdrdrv.service
    fi
    write_file "$prefix/.fminfra-stamp" "$STAMP"
}

main() {
    node_script_init "$@"
    GDRCOPY_VERSION=$(ver GDRCOPY_VERSION)
    GDRCOPY_COMMIT=$(ver_optional GDRCOPY_COMMIT)
    KERNEL=$(kernel_release)
    STAMP="gdrcopy $GDRCOPY_VERSION commit ${GDRCOPY_COMMIT:-unpinned}, gdrdrv for kernel $KERNEL"
    # optional in --verify (a WARN, not a FAIL): aws-ofi-nccl loads GDRCopy at run time only
    # (docs/facts/node-software.md#gdrcopy-loader-and-module), and the HyperPod AMIs' release notes
    # name it in some releases only (docs/facts/hyperpod.md#hyperpod-slurm-ami-contents).
    step gdrcopy "$STAMP" check_gdrcopy apply_gdrcopy optional
    finish_steps
}

main "$@"
