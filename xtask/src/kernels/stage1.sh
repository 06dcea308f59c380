#!/bin/busybox sh
# Stage 1 of a guest of `cargo xtask test --kernel` (the initramfs's /init,
# static busybox): load the modules that reach the host, mount the host's /
# (9p, read-only) under a tmpfs overlay, the run's share (9p, read-write) at
# /run/xtask, then hand over to stage 2 there, bash on the host's root.
B=/bin/busybox
log() { $B echo "xtask-guest: $*" > /dev/kmsg; }
fail() { log "FAILED: $*"; $B sync; $B echo o > /proc/sysrq-trigger; $B sleep 5; $B poweroff -f; }
$B mkdir -p /proc /sys /dev /lower /rw /newroot
$B mount -t proc proc /proc
$B mount -t sysfs sysfs /sys
$B mount -t devtmpfs devtmpfs /dev
log "stage 1"
for m in $($B cat /mods.order); do $B insmod /mods/$m || log "insmod $m failed"; done
O=trans=virtio,version=9p2000.L,msize=512000
$B mount -t 9p -o $O,ro,cache=loose hostroot /lower || fail "9p mount of the host's /"
$B mount -t tmpfs -o mode=0755 rw /rw && $B mkdir /rw/upper /rw/work
N=/newroot
$B mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay $N ||
  fail "overlay of the host's /"
$B mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs $N/run || fail "tmpfs on /run"
$B mkdir -p $N/run/xtask
$B mount -t 9p -o $O,cache=none xtask $N/run/xtask || fail "9p mount of the run's share"
for d in dev proc sys; do $B mount --move /$d $N/$d; done
log "switch_root"
exec $B switch_root $N /bin/bash /run/xtask/stage2.sh
fail "switch_root"
