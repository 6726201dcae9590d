#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The phos demo: mount phosfs on a temporary directory, run examples/counter
# under phos (on the GPU if there is one, else on simcuda, the software
# CUDA driver), checkpoint it, copy the image, kill the program, restore it
# from the copy, and show its state before and after.
#
#   make demo        (as root: FUSE and CRIU need it)
set -euo pipefail
build=${PHOS_BUILD:-build}
phosfs=${PHOS_PHOSFS:-$build/phosfs/phosfs}
phos=${PHOS_CLI:-$build/phos}
counter=${PHOS_COUNTER:-$build/examples/counter}
export PHOS_CRIU=${PHOS_CRIU:-deps/criu/sbin/criu}
export PHOS_LIBPHOS=${PHOS_LIBPHOS:-$build/libphos.so}
if [ "$(id -u)" != 0 ]; then
	echo "demo: needs root (FUSE mount and CRIU)" >&2
	exit 1
fi
if [ -e /dev/nvidia0 ] && ldconfig -p | grep -q 'libcuda.so.1 '; then
	where="the GPU"
else
	export LD_LIBRARY_PATH=${PHOS_SIMCUDA:-$build/simcuda}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	where="simcuda (no GPU here)"
fi
work=$(mktemp -d /tmp/phos-demo.XXXXXX)
export PHOS_MOUNT=$work/phos PHOS_SOCKET=$work/phosfs.sock
mkdir -p "$PHOS_MOUNT"
"$phosfs" --socket "$PHOS_SOCKET" --store "$work/store" -f "$PHOS_MOUNT" 2>"$work/phosfs.log" &
fs=$!
pid=
cleanup() {
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
	kill "$fs" 2>/dev/null
	wait "$fs" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 50); do [ -e "$PHOS_MOUNT/version" ] && break; sleep 0.1; done
say() { printf '\n\033[1m%s\033[0m\n' "$*"; }
wait_for() { for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; echo "demo: timed out waiting for '$2' in $1" >&2; return 1; }

say "1. phosfs is mounted on $PHOS_MOUNT; counter runs on $where with 64 MiB of device memory"
"$phos" run -- "$counter" 64 >"$work/pid" 2>/dev/null &
runner=$!
for _ in $(seq 50); do [ -s "$work/pid" ] && break; sleep 0.1; done
pid=$(cat "$work/pid")
out=$work/store/run/$pid.out
wait_for "$out" "count 20"
echo "\$ phos ls"
"$phos" ls
echo "counter's output: $(grep count "$out" | tail -1)"

say "2. echo checkpoint stop > $PHOS_MOUNT/$pid/ctl, and copy the image while it is written"
echo checkpoint stop >"$PHOS_MOUNT/$pid/ctl"
cp -r "$PHOS_MOUNT/$pid/checkpoints/1" "$work/copy"
grep -E '^(last job|stall ms)' "$PHOS_MOUNT/$pid/status"
"$build/phos-image" verify "$work/copy"
sleep 1
before=$(grep count "$out" | tail -1)
echo "state before the kill: $before"

say "3. kill -9 $pid, then phos restore $work/copy"
kill -9 "$pid"
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
wait "$runner" 2>/dev/null || true
# The job comes back with the pid phos restore prints (its old one; a job
# of phos run --pid-ns would get a new one).
pid=$("$phos" restore "$work/copy")
echo "restored pid: $pid"
sleep 0.5
kill -USR1 "$pid"
wait_for "$out" "verify ok"
sleep 1.2
echo "state after the restore: $(grep -E 'verify' "$out" | tail -1); then $(grep count "$out" | tail -1)"
echo "(it went on from the checkpoint, and checked every byte of its device memory)"
