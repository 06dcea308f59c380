#!/bin/bash
# Stage 2 of a guest of `cargo xtask test --kernel` (PID 1, bash on the
# host's root under the overlay): make the guest a host like the project's
# (the kernel's filesystems, cgroup2 with every controller handed to the
# children at the root as systemd does, bpffs, this kernel's modules), tell
# what holds each promise here (`lockrun doctor --json --no-canary` into
# /run/xtask/promises.json; not one of the plan's commands), run the plan's
# commands one after another, each under a time limit, with their output
# into /run/xtask/output, then power off.
# /run/xtask/status: "boot <uptime>", "start <n> <uptime>",
# "end <n> <exit status> <uptime>", "done".
X=/run/xtask
. $X/guest.conf   # RELEASE MODULES TOTAL LIMIT (seconds per command) LOCKRUN (may be empty)
#                   KEEP_TMP: the host's /tmp entries the plan runs from
exec 3>$X/output
uptime_s() { local up _; read -r up _ < /proc/uptime; echo "$up"; }
status() { echo "$*" >> $X/status; }
status "boot $(uptime_s)"
m() {
  mkdir -p "$3" 2>/dev/null
  mount -t "$1" -o "$2" "$1" "$3" || echo "xtask-guest: mount -t $1 $3 failed" >&3
}
m devpts gid=5,mode=620,ptmxmode=666 /dev/pts
m tmpfs mode=1777,nosuid,nodev /dev/shm
m mqueue rw /dev/mqueue
m securityfs rw /sys/kernel/security
m cgroup2 rw,nsdelegate /sys/fs/cgroup
m bpf mode=700 /sys/fs/bpf
m debugfs rw /sys/kernel/debug
m tracefs rw /sys/kernel/tracing
# /tmp: ext4 on /dev/vdb (made by xtask), as this machine's /tmp is.
# (ext4 is loaded by stage 1.) What the plan runs from in the host's /tmp
# (a clone there, its target dir) is bound back over it.
if [ ${#KEEP_TMP[@]} -gt 0 ]; then
  mkdir -p /run/host-tmp && mount --bind /tmp /run/host-tmp
fi
{ mount -t ext4 /dev/vdb /tmp 2>&3 && chmod 1777 /tmp; } ||
  { echo "xtask-guest: ext4 /tmp failed; a tmpfs instead" >&3; m tmpfs mode=1777,nosuid /tmp; }
for k in "${KEEP_TMP[@]}"; do
  mkdir -p "/tmp/$k" && mount --bind "/run/host-tmp/$k" "/tmp/$k" ||
    echo "xtask-guest: the host's /tmp/$k is out of sight" >&3
done
for c in $(cat /sys/fs/cgroup/cgroup.controllers); do
  echo "+$c" > /sys/fs/cgroup/cgroup.subtree_control || echo "xtask-guest: cgroup controller $c not enabled" >&3
done
ln -sfn /proc/self/fd /dev/fd; ln -sfn /proc/self/fd/0 /dev/stdin
ln -sfn /proc/self/fd/1 /dev/stdout; ln -sfn /proc/self/fd/2 /dev/stderr
mkdir -p "/lib/modules/$RELEASE" && mount --bind "$MODULES" "/lib/modules/$RELEASE" ||
  echo "xtask-guest: the kernel's modules are not at /lib/modules/$RELEASE" >&3
ip link set lo up
# An address of the host's own beyond loopback, as every host has (the
# address guard's tests judge that one): a dummy eth0, with no route beyond.
{ ip link add eth0 type dummy && ip addr add 10.0.2.15/24 dev eth0 &&
  ip addr add fd00::15/64 dev eth0 nodad && ip link set eth0 up; } 2>&3 ||
  echo "xtask-guest: no dummy eth0: the guest has only loopback" >&3
echo xtask-guest > /proc/sys/kernel/hostname

if [ -n "$LOCKRUN" ]; then
  echo "xtask: lockrun doctor --json --no-canary" >&3
  timeout -k 10 "$LIMIT" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$LOCKRUN" doctor --json --no-canary \
    </dev/null >$X/promises.json 2>&3
  echo "xtask: lockrun doctor: exit $? (3: something lacks, the report says what)" >&3
fi

n=0
# run LABEL CWD: run the command A (argv) with exactly the environment E.
run() {
  local t0 t1 rc
  n=$((n + 1))
  echo "xtask: running $1 ($n/$TOTAL)" >&3
  t0=$(uptime_s)
  status "start $n $t0"
  # Not exec'd: timeout's group (the test binary's) has a parent other than
  # init, as under cargo. A group whose members' parents are all init or in
  # it is orphaned, and the kernel sends SIGHUP to all of it when it holds a
  # stopped process and a member exits (a test stops one outside its run).
  # (The status is taken after it, so that bash cannot exec it.)
  (cd "$2" || exit 1; timeout -k 10 "$LIMIT" env -i "${E[@]}" "${A[@]}"; s=$?; exit $s) </dev/null >&3 2>&3
  rc=$?
  t1=$(uptime_s)
  status "end $n $rc $t1"
  echo "xtask: $1: exit $rc, $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s" >&3
}
. $X/plan.sh
status done
exec 3>&-
sync
echo o > /proc/sysrq-trigger
sleep 10
echo b > /proc/sysrq-trigger
