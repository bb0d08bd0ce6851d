#!/usr/bin/env bash
# The kernel matrix: boot each Debian kernel package in QEMU (TCG: KVM guests
# fail on these VMs' CPU model) with an initramfs holding the bpf package's
# tests (built with CGO_ENABLED=0) and scripts/kernelmatrix as init, run them
# there, and print the table of what each kernel loaded. Exits 1 where a
# guest's tests failed or skipped. Needs qemu-system-x86, cpio, apt-get.
#
#   KERNEL_MATRIX_PACKAGES  the kernel packages (default: the newest Debian 12
#                           6.1 and 6.12 cloud kernels apt knows)
#   KERNEL_MATRIX_DIR       where packages, initramfs and logs go
#   KERNEL_MATRIX_RUN       a -test.run pattern: only those tests (default: all)
#   KERNEL_MATRIX_COST      0: no guests measuring the hooks' cost (default: 1)
#   KERNEL_MATRIX_DRM       1: one more guest, of Debian 12's newest generic
#                           (non-cloud) 6.12 kernel with vgem loaded, runs
#                           capture/accel's TestDRMGuest on a real DRM driver;
#                           a package name picks its kernel; "only" runs
#                           that guest alone (default: none)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
work=${KERNEL_MATRIX_DIR:-${TMPDIR:-/tmp}/gpusnap-kernel-matrix}
mkdir -p "$work/debs"

newest() { apt-cache search --names-only "$1" | cut -d' ' -f1 | sort -V | tail -1; }
pkgs=${KERNEL_MATRIX_PACKAGES:-"$(newest '^linux-image-6\.1\.0-[0-9]+-cloud-amd64$') $(newest '^linux-image-6\.12\.[0-9]+\+deb12-cloud-amd64$')"}
drm=${KERNEL_MATRIX_DRM:-}
case "$drm" in
  "") ;;
  1 | only) drm=$(newest '^linux-image-6\.12\.[0-9]+\+deb12-amd64$') ;;
esac
[ "${KERNEL_MATRIX_DRM:-}" != only ] || pkgs=""

CGO_ENABLED=0 go test -c -o "$work/rd/bpf.test" ./bpf
CGO_ENABLED=0 go build -o "$work/rd/init" ./scripts/kernelmatrix
# The device users of the short-lived-users test: a static C binary starts in
# milliseconds under TCG, a Go one in a second.
gcc -O -Wall -static -o "$work/rd/burst" internal/livetest/helper/burst.c
(cd "$work/rd" && find . | cpio -o -H newc --quiet) | gzip -1 >"$work/initrd.gz"

# Each guest is one emulated CPU: they boot side by side, one host core each.
# A kernel's tests run in one guest; its hooks' cost (TestHookCost) in a
# second one, with QEMU's -icount: the guest's clock then counts the
# instructions it ran, so a ratio of two loops' times is a ratio of the work
# they did, whatever the load on the host (under TCG alone, the guest's clock
# runs on while the host has QEMU waiting).
# unpack downloads a kernel package once and unpacks it under $work/PKG.
unpack() {
  local pkg=$1 deb
  deb=$(ls "$work/debs/${pkg}_"*.deb 2>/dev/null | head -1 || true)
  if [ -z "$deb" ]; then
    (cd "$work/debs" && apt-get download -q "$pkg" >/dev/null 2>&1)
    deb=$(ls "$work/debs/${pkg}_"*.deb | head -1)
  fi
  [ -d "$work/$pkg/boot" ] || dpkg-deb -x "$deb" "$work/$pkg"
}

boot() {
  local pkg=$1 kind=$2 kernel log start accel=() filter initrd="$work/initrd.gz"
  unpack "$pkg"
  kernel=$(ls "$work/$pkg"/boot/vmlinuz-* | head -1)
  log="$work/$pkg.$kind.log"
  case "$kind" in
    cost)
      accel=(-icount shift=0)
      filter="gpusnap.run=TestHookCost" ;;
    drm)
      initrd="$work/drm-initrd.gz"
      filter="gpusnap.test=/accel.test gpusnap.run=TestDRMGuest" ;;
    *) filter="gpusnap.skip=TestHookCost${KERNEL_MATRIX_RUN:+ gpusnap.run=$KERNEL_MATRIX_RUN}" ;;
  esac
  start=$(date +%s)
  # lsm= puts bpf in the LSM list, which Debian's default leaves out.
  timeout 900 qemu-system-x86_64 -accel tcg "${accel[@]}" -cpu max -smp 1 -m 1024 -nographic -no-reboot \
    -kernel "$kernel" -initrd "$initrd" \
    -append "console=ttyS0 panic=-1 quiet lsm=lockdown,capability,landlock,yama,bpf $filter" \
    </dev/null >"$log" 2>&1 || true
  echo "kernel-matrix: $pkg ($kind) ran in $(($(date +%s) - start)) s (log: $log)" >&2
}

# KERNEL_MATRIX_COST=0 leaves out the cost guests.
kinds="tests"
[ "${KERNEL_MATRIX_COST:-1}" = 0 ] || kinds="tests cost"
logs=()
for kind in $kinds; do
  for pkg in $pkgs; do
    rm -f "$work/$pkg.$kind.log"
    boot "$pkg" "$kind" &
    logs+=("$work/$pkg.$kind.log")
  done
  wait
done
# The DRM guest: vgem and the modules it needs (Debian's xz files, which
# the init loads in this order), capture/accel's tests and drmuser.
if [ -n "$drm" ]; then
  unpack "$drm"
  rm -rf "$work/drm-rd" && mkdir -p "$work/drm-rd/modules"
  for m in drm drm_kms_helper drm_shmem_helper vgem; do
    f=$(find "$work/$drm/lib/modules" -name "$m.ko*" | head -1)
    cp "$f" "$work/drm-rd/modules/"
    basename "$f" >>"$work/drm-rd/modules/order"
  done
  cp "$work/rd/init" "$work/drm-rd/init"
  CGO_ENABLED=0 go test -c -o "$work/drm-rd/accel.test" ./capture/accel
  gcc -O -Wall -static -o "$work/drm-rd/drmuser" internal/livetest/helper/drmuser.c
  (cd "$work/drm-rd" && find . | cpio -o -H newc --quiet) | gzip -1 >"$work/drm-initrd.gz"
  rm -f "$work/$drm.drm.log"
  boot "$drm" drm
  logs+=("$work/$drm.drm.log")
fi
"$work/rd/init" table "${logs[@]}"
