#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The whole phos flow on a real GPU, with a real phosfs mount:
#   1. a CUDA C program holding 16 GiB of device memory (examples/counter)
#      is checkpointed with `stop` while `cp -r` copies the checkpoint,
#      killed with -9, restored from the copy, and checks every byte of its
#      device memory;
#   2. a PyTorch training loop is checkpointed, killed and restored, and
#      its losses after the restore are those of an uninterrupted run;
#   3. an untraced CUDA process is checkpointed with `stop` and restored;
#   4. a CUDA C program (1 GiB) is checkpointed with `stop kill` and
#      restored with `--device` mapping every GPU to itself: the driver is
#      given gpuPairs (the path of a restore onto another GPU), and the
#      program checks every byte.
# A job of `phos run` comes back under a new pid (the one `phos restore`
# prints), in a pid namespace of its own, and writes on to its original
# output file; each case goes on with that pid, and checks that it runs.
# Needs root, FUSE and a GPU. PHOS_GPU_GIB sets the size of 1 (default 16).
b=${PHOS_BUNDLE:-gpu-bundle}
src=${PHOS_SRCDIR:-$b/..}
gib=${PHOS_GPU_GIB:-16}
echo "1..4"
if [ "$(id -u)" != 0 ] || [ ! -e /dev/fuse ]; then
	echo "# SKIP needs root and /dev/fuse"
	for i in 1 2 3 4; do echo "ok $i # skip needs root and FUSE"; done
	exit 0
fi
. "$b/share/gpu-rig.sh"
rig_mount gpu ||
	{ for i in 1 2 3 4; do echo "not ok $i - phosfs did not mount (bundle $b)"; done; exit 1; }

# 1. CUDA C, 16 GiB.
# phos-init, the job's parent, reaps a killed job at once.
pid=$(start "$work/pid1" "$b/examples/counter" $((gib * 1024)))
opid=$pid out=$store/run/$pid.out
ok=0
if wait_line "$out" "count 10" 300; then
	t0=$(now)
	"$phos" checkpoint "$pid" stop --name first >/dev/null &&
		cp -r "$mnt/$pid/checkpoints/first" "$work/copy" &&
		"$phos" checkpoint "$pid" stop --wait >/dev/null
	t1=$(now)
	grep -E 'stall|last job' "$mnt/$pid/status" | sed 's/^/# /'
	kill -9 "$pid"
	gone "$pid"
	t2=$(now)
	rpid=$("$phos" restore "$work/copy")
	t3=$(now)
	echo "# checkpoint+copy $(awk "BEGIN{print $t1 - $t0}") s; restore $(awk "BEGIN{print $t3 - $t2}") s; restored pid $rpid (was $pid)"
	pid=$rpid
	sleep 1
	if follow "$pid" && kill -USR1 "$pid" && wait_line "$out" "verify ok" 600; then ok=1; fi
	grep -E 'verify|FAILED' "$out" | sed 's/^/# /'
fi
[ $ok = 1 ] && echo "ok 1 - a ${gib} GiB CUDA C program is checkpointed while copied, killed, restored from the copy, and its device memory is intact" ||
	echo "not ok 1 - the ${gib} GiB CUDA C program did not come back intact"
kill_job "$pid"; rm -rf "$work/copy"; [ -n "$opid" ] && rm -rf "${store:?}/$opid"

# 2. PyTorch.
if ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	echo "ok 2 # skip no PyTorch with CUDA"
else
	plain=$(python3 "$src/examples/pytorch/train_mlp.py" --steps 120 2>&1)
	pid=$(start "$work/pid2" python3 "$src/examples/pytorch/train_mlp.py" --steps 120 --sleep 0.05)
	opid=$pid out=$store/run/$pid.out err=$store/run/$pid.err
	ok=0
	if wait_line "$out" "^step 30 " 120; then
		"$phos" checkpoint "$pid" stop --wait | sed 's/^/# /'
		kill -9 "$pid"; gone "$pid"
		rpid=$("$phos" restore "$mnt/$pid/checkpoints/latest")
		pid=$rpid back=0
		follow "$pid" && back=1
		wait_line "$out" "^step 119 " 120
		# Every line, from before the kill and after the restore, is the
		# uninterrupted run's line for that step.
		bad=$(grep '^step' "$out" | sort -u | grep -vxF -f <(printf '%s\n' "$plain") | wc -l)
		last=$(grep -c '^step' "$out")
		echo "# restored $rpid (was $opid); $last step lines, $bad differ from the uninterrupted run"
		[ "$back" = 1 ] && [ "$bad" = 0 ] && grep -q '^step 119 ' "$out" && ok=1
		grep -v '^step' "$out" "$err" 2>/dev/null | tail -5 | sed 's/^/# /'
	fi
	[ $ok = 1 ] && echo "ok 2 - a PyTorch training loop restored from a checkpoint continues with the losses of an uninterrupted run" ||
		echo "not ok 2 - the PyTorch loop did not continue exactly"
	kill_job "$pid"; [ -n "$opid" ] && rm -rf "${store:?}/$opid"
fi

# 3. Untraced, and not under phos run: no namespace of its own, so it comes
# back under its old pid; the test goes on with the one printed all the same.
setsid "$b/examples/counter" 1024 </dev/null >>"$work/untraced.out" 2>&1 &
pid=$!
echo "$pid" >>"$work/pids"
ok=0
if wait_line "$work/untraced.out" "count 10" 120; then
	"$phos" checkpoint "$pid" stop --wait | sed 's/^/# /'
	grep traced "$mnt/$pid/status" | sed 's/^/# /'
	kill -9 "$pid"; wait "$pid" 2>/dev/null
	rpid=$("$phos" restore "$mnt/$pid/checkpoints/latest")
	echo "# restored $rpid (was $pid)"
	pid=$rpid
	sleep 1
	follow "$pid" && kill -USR1 "$pid" && wait_line "$work/untraced.out" "verify ok" 120 && ok=1
	grep -E 'verify|FAILED' "$work/untraced.out" | sed 's/^/# /'
fi
[ $ok = 1 ] && echo "ok 3 - an untraced CUDA process is checkpointed with stop and restored intact" ||
	echo "not ok 3 - the untraced process did not come back"
kill_job "$pid"

# 4. Explicit gpuPairs: every GPU onto itself.
pid=$(start "$work/pid4" "$b/examples/counter" 1024)
out=$store/run/$pid.out
ok=0
if wait_line "$out" "count 10" 120; then
	"$phos" checkpoint "$pid" stop --kill --wait >/dev/null
	gone "$pid"
	n=$(nvidia-smi -L | wc -l)
	pairs=$(seq 0 $((n - 1)) | awk '{printf "%s%d=%d", (NR > 1 ? "," : ""), $1, $1}')
	rpid=$("$phos" restore "$mnt/$pid/checkpoints/latest" --device "$pairs" 2>"$work/restore4.err")
	sed 's/^/# /' "$work/restore4.err"
	grep -E '^(moved gpus|error)' "$mnt/status" | sed 's/^/# /'
	echo "# restored $rpid (was $pid)"
	pid=$rpid
	sleep 1
	follow "$pid" && kill -USR1 "$pid" && grep -q '^moved gpus: 0 (' "$mnt/status" && wait_line "$out" "verify ok" 120 && ok=1
	grep -E 'verify|FAILED' "$out" | sed 's/^/# /'
fi
[ $ok = 1 ] && echo "ok 4 - restored through explicit gpuPairs (--device $pairs), the program's device memory is intact" ||
	echo "not ok 4 - the restore through explicit gpuPairs did not come back intact"
kill_job "$pid"
