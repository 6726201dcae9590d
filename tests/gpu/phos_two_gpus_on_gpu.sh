#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Two GPUs of one machine, with a real phosfs mount:
#   1. tests/apps/two_gpu_app (a buffer on each GPU, peer copies both ways)
#      is checkpointed with stop, cow and recopy; after each, killed,
#      restored, and every byte of both buffers checks;
#   2. checkpointed with stop kill and restored with the GPUs swapped
#      (--device 0=1,1=0): it checks, and its ordinals now name the other
#      GPUs (the UUIDs it prints);
#   3. examples/counter on GPU 0, checkpointed with stop kill and restored
#      on GPU 1 (--device 0=1): it checks, and nvidia-smi shows its memory
#      on GPU 1;
#   4. two_gpu_app without peer access ("nopeer"), whose plain copies
#      between the GPUs the tracer makes peer copies: it checks, and again
#      after a stop kill and a restore;
#   5. PyTorch with the model split over the two GPUs
#      (examples/pytorch/train_mlp.py --split), checkpointed with stop
#      kill and restored with the GPUs swapped: every step line is the
#      uninterrupted run's.
# Each restore gives the process a new pid (the one `phos restore` prints;
# it writes on to the original's output file): each case goes on with it,
# so in 1 each checkpoint is of the process the last restore made.
# Prints the stall and restore time of each. Needs root, FUSE and two GPUs
# (it skips on one). PHOS_TWO_GPU_MIB sets the buffers of 1 and 2 (default
# 1024 each); PHOS_KEEP_LOGS=DIR keeps phosfs's log there.
b=${PHOS_BUNDLE:-gpu-bundle}
src=${PHOS_SRCDIR:-$b/..}
mib=${PHOS_TWO_GPU_MIB:-1024}
echo "1..5"
skip() { for i in 1 2 3 4 5; do echo "ok $i # skip $1"; done; exit 0; }
[ "$(id -u)" = 0 ] && [ -e /dev/fuse ] || skip "needs root and FUSE"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "$ngpu" -ge 2 ] || skip "needs two GPUs (this machine has ${ngpu:-0})"
. "$b/share/gpu-rig.sh"
rig_mount two-gpus --criu-plugins "$b/criu-plugins" ||
	{ for i in 1 2 3 4 5; do echo "not ok $i - phosfs did not mount (bundle $b)"; done; exit 1; }
verify() { # PID OUT: asks for a check; 0 when one more "verify ok" came
	local n
	n=$(grep -c '^verify ok' "$2")
	kill -USR1 "$1"
	for _ in $(seq 1200); do
		grep -q '^verify FAILED' "$2" && return 1
		[ "$(grep -c '^verify ok' "$2")" -gt "$n" ] && return 0
		sleep 0.1
	done
	return 1
}
restore() { # DIR [--device LIST]: prints the pid; the time goes to $work/rt
	local t0 t1 p
	t0=$(now)
	p=$("$phos" restore "$@" 2>>"$work/restore.err")
	t1=$(now)
	awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}' >"$work/rt"
	echo "$p"
}

# 1. Every protocol, each GPU's memory back to its own GPU.
pid=$(start "$work/pid1" "$b/apps/two_gpu_app" "$mib" "$(date +%s)")
out=$store/run/$pid.out
good=0
if wait_line "$out" "^ops 200" 300; then
	echo "# two_gpu_app: $(grep -m1 "^peer access" "$out")"
	for proto in stop cow recopy; do
		"$phos" checkpoint "$pid" "$proto" --name "$proto" --wait >/dev/null || break
		verify "$pid" "$out" || break
		echo "# $proto: stall $(stall "$pid") ms"
		kill -9 "$pid"
		gone "$pid"
		rpid=$(restore "$mnt/$pid/checkpoints/$proto")
		pid=$rpid
		follow "$pid" && verify "$pid" "$out" || break
		echo "# $proto: restore $(cat "$work/rt") s, pid $pid; $(grep '^verify ok' "$out" | tail -1)"
		good=$((good + 1))
	done
fi
[ $good = 3 ] && echo "ok 1 - a process on two GPUs is checkpointed with stop, cow and recopy, and each restore checks on both GPUs" ||
	echo "not ok 1 - the two-GPU process did not come back intact ($good of 3 protocols)"
grep -E 'FAILED|failed' "$out" | head -3 | sed 's/^/# /'

# 2. The same process, restored with the GPUs swapped.
ok=0
if [ $good = 3 ]; then
	before=$(grep '^verify ok' "$out" | tail -1 | awk '{print $6, $7}')
	"$phos" checkpoint "$pid" stop --name swap --kill --wait >/dev/null
	echo "# swap: stall $(stall "$pid") ms"
	gone "$pid"
	rpid=$(restore "$mnt/$pid/checkpoints/swap" --device 0=1,1=0)
	pid=$rpid
	if follow "$pid" && verify "$pid" "$out"; then
		after=$(grep '^verify ok' "$out" | tail -1 | awk '{print $6, $7}')
		echo "# swap: restore $(cat "$work/rt") s; GPUs before: $before; after: $after"
		set -- $before
		[ "$after" = "$2 $1" ] && ok=1
	fi
fi
[ $ok = 1 ] && echo "ok 2 - restored with the GPUs swapped, both buffers check, each on the other GPU" ||
	echo "not ok 2 - the restore with the GPUs swapped did not come back intact"
kill_job "$pid"

# 3. A one-GPU program, from GPU 0 to GPU 1.
pid=$(start "$work/pid3" "$b/examples/counter" "$mib")
out=$store/run/$pid.out
ok=0
if wait_line "$out" "count 10" 120; then
	"$phos" checkpoint "$pid" stop --kill --wait >/dev/null
	echo "# counter: stall $(stall "$pid") ms"
	gone "$pid"
	rpid=$(restore "$mnt/$pid/checkpoints/latest" --device 0=1)
	pid=$rpid
	gpu1=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 1)
	on=$(nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader | awk -F', ' -v p="$pid" '$1 == p {print $2}')
	echo "# counter: restore $(cat "$work/rt") s, pid $pid; its memory is on $on (GPU 1 is $gpu1)"
	follow "$pid" && verify "$pid" "$out" && [ "$on" = "$gpu1" ] && ok=1
fi
[ $ok = 1 ] && echo "ok 3 - a program checkpointed on GPU 0 is restored on GPU 1, and its memory checks there" ||
	echo "not ok 3 - the program did not come back intact on GPU 1"
kill_job "$pid"

# 4. Without peer access: plain copies between the GPUs still work.
pid=$(start "$work/pid4" "$b/apps/two_gpu_app" "$mib" "$(date +%s)" nopeer)
out=$store/run/$pid.out
ok=0
if wait_line "$out" "^ops 200" 300 && grep -q '^peer access off' "$out" && verify "$pid" "$out"; then
	"$phos" checkpoint "$pid" stop --name nopeer --kill --wait >/dev/null
	gone "$pid"
	rpid=$(restore "$mnt/$pid/checkpoints/nopeer")
	pid=$rpid
	follow "$pid" && verify "$pid" "$out" && ok=1
	echo "# nopeer: pid $pid; $(grep '^verify ok' "$out" | tail -1)"
fi
[ $ok = 1 ] && echo "ok 4 - without peer access, plain copies between the GPUs check, before and after a restore" ||
	echo "not ok 4 - without peer access, the two-GPU process failed"
grep -E 'FAILED|failed' "$out" | head -3 | sed 's/^/# /'
kill_job "$pid"

# 5. PyTorch, the model split over both GPUs, restored swapped.
if ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.device_count() >= 2 else 1)' 2>/dev/null; then
	echo "ok 5 # skip no PyTorch with two GPUs"
	exit 0
fi
plain=$(python3 "$src/examples/pytorch/train_mlp.py" --split --steps 120 2>&1)
pid=$(start "$work/pid5" python3 "$src/examples/pytorch/train_mlp.py" --split --steps 120 --sleep 0.05)
out=$store/run/$pid.out err=$store/run/$pid.err
ok=0
if wait_line "$out" "^step 30 " 180; then
	"$phos" checkpoint "$pid" stop --kill --wait >/dev/null
	echo "# pytorch: stall $(stall "$pid") ms"
	gone "$pid"
	rpid=$(restore "$mnt/$pid/checkpoints/latest" --device 0=1,1=0)
	pid=$rpid back=0
	follow "$pid" && back=1
	wait_line "$out" "^step 119 " 180
	bad=$(grep '^step' "$out" | sort -u | grep -vxF -f <(printf '%s\n' "$plain") | wc -l)
	echo "# pytorch: restore $(cat "$work/rt") s, pid $pid; $(grep -c '^step' "$out") step lines, $bad differ from the uninterrupted run"
	[ "$back" = 1 ] && [ "$bad" = 0 ] && grep -q '^step 119 ' "$out" && ok=1
	grep -v '^step' "$out" "$err" 2>/dev/null | tail -5 | sed 's/^/# /'
else
	echo "# pytorch: no step 30 within 180 s; what it said:"
	tail -5 "$out" "$err" 2>/dev/null | sed 's/^/# /'
fi
[ $ok = 1 ] && echo "ok 5 - PyTorch split over two GPUs, restored with the GPUs swapped, continues with the losses of an uninterrupted run" ||
	echo "not ok 5 - the split PyTorch run did not continue exactly"
sed 's/^/# /' "$work/restore.err" | tail -5
