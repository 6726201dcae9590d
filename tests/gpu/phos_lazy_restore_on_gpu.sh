#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Lazy restore on a real GPU, against eager restore of the same image:
#   1. a CUDA C program holding PHOS_GPU_GIB GiB (default 16) of device
#      memory (examples/counter) is checkpointed with `stop` and killed;
#      `phos restore DIR lazy` brings it back, it checks every byte of its
#      device memory (which waits for the fill), and status shows the time
#      to resume, the time to fully restored and the calls that waited;
#   2. the same image restored `eager`, checked the same way, for the
#      comparison.
# Each restore gives the program a new pid (the one `phos restore` prints;
# it writes on to the original's output file): 2 kills the process 1 made.
# Each prints the restore's status lines. Needs root, FUSE and a GPU.
b=${PHOS_BUNDLE:-gpu-bundle}
gib=${PHOS_GPU_GIB:-16}
echo "1..2"
if [ "$(id -u)" != 0 ] || [ ! -e /dev/fuse ]; then
	echo "# SKIP needs root and /dev/fuse"
	for i in 1 2; do echo "ok $i # skip needs root and FUSE"; done
	exit 0
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
	for i in 1 2; do echo "ok $i # skip no GPU"; done
	exit 0
fi
. "$b/share/gpu-rig.sh"
rig_mount lazy ||
	{ for i in 1 2; do echo "not ok $i - phosfs did not mount (bundle $b)"; done; exit 1; }

pid=$(start "$work/pid" "$b/examples/counter" $((gib * 1024)))
out=$store/run/$pid.out
image=
if wait_line "$out" "count 10" 300 && "$phos" checkpoint "$pid" stop --name img --wait >/dev/null; then
	image=$store/$pid/img
	grep -E '^(stall ms|steps ms)' "$mnt/$pid/status" | sed 's/^/# checkpoint: /'
fi

# restore_and_check N MODE: kills the program, restores the image in
# MODE, goes on with the pid the restore printed, and waits for its check
# of every byte.
restore_and_check() {
	local n=$1 mode=$2 t0 t1 rpid seen
	kill_job "$pid"
	seen=$(grep -c 'verify ok' "$out")
	t0=$(now)
	rpid=$([ -n "$image" ] && "$phos" restore "$image" "$mode")
	t1=$(now)
	echo "# $mode: restored pid $rpid (was $pid)"
	pid=$rpid
	local ok=0
	if follow "$pid" && kill -USR1 "$pid"; then
		for _ in $(seq 600); do
			[ "$(grep -c 'verify ok' "$out")" -gt "$seen" ] && ok=1 && break
			grep -q FAILED "$out" && break
			sleep 0.1
		done
	fi
	for _ in $(seq 300); do grep -q '^fully restored ms' "$mnt/status" && grep -q '^job: none' "$mnt/status" && break; sleep 0.1; done
	echo "# $mode: phos restore returned after $(awk "BEGIN{printf \"%.3f\", $t1 - $t0}") s"
	grep -E '^(resumed ms|fully restored ms|on-demand waits|safety-net waits|filled on demand|steps ms|error)' "$mnt/status" |
		sed "s/^/# $mode: /"
	grep -E 'verify|FAILED' "$out" | tail -1 | sed "s/^/# $mode: /"
	if [ -n "$image" ] && [ $ok = 1 ]; then
		echo "ok $n - a $gib GiB CUDA C program restored $mode runs and its device memory is intact"
	else
		echo "not ok $n - the $gib GiB CUDA C program restored $mode did not come back intact"
	fi
}
restore_and_check 1 lazy
restore_and_check 2 eager
kill_job "$pid"
