#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Copy-on-write checkpoints on a real GPU, with a real phosfs mount:
#   1. tests/apps/cow_app (2 GiB of device memory in eight buffers, kernels
#      that read one buffer and write another, a T** kernel, memsets, host
#      copies, frees and allocations) is checkpointed with cow at 20 random
#      moments; each time the running process checks every byte against its
#      host copies, then it is killed with -9, restored from that image and
#      checks again: the image is the state at t1. The restores alternate
#      lazy (the default: the process runs on at once and checks its
#      buffers while they come back) and eager, lazy first.
#   2. PyTorch training is checkpointed with cow every 2 s for 60 s, killed
#      and restored from the latest checkpoint: every step line after it
#      (batch checksum and loss) is the uninterrupted run's.
# With PHOS_GPU_PROTOCOL=recopy (tests/gpu/phos_recopy_on_gpu.sh) the
# same runs take recopy checkpoints, whose images hold the state at t2
# (the final stall): in 1 the last one is a recopy kill, and in 2 the
# training is checkpointed once with recopy kill, as a migration does,
# after 30 s, and restored lazily.
# Each restore gives the job a new pid (the one `phos restore` prints; its
# output file stays the original's): the test goes on with that pid, so
# in 1 each checkpoint is of the process the last restore made.
# Needs root, FUSE, a GPU (and PyTorch with CUDA for 2).
# PHOS_COW_ITERATIONS and PHOS_COW_MIB change case 1; PHOS_KEEP_LOGS=DIR
# keeps phosfs's log there. PHOS_COW_HOST=1 runs tests/apps/host_writer in
# case 1 instead (tests/gpu/phos_host_memory_after_the_stall_on_gpu.sh),
# and no case 2.
b=${PHOS_BUNDLE:-gpu-bundle}
src=${PHOS_SRCDIR:-$b/..}
proto=${PHOS_GPU_PROTOCOL:-cow}
iters=${PHOS_COW_ITERATIONS:-20}
state_at=t1
[ "$proto" = recopy ] && state_at=t2
mib=${PHOS_COW_MIB:-2048}
echo "1..2"
skip() { for i in 1 2; do echo "ok $i # skip $1"; done; exit 0; }
[ "$(id -u)" = 0 ] && [ -e /dev/fuse ] || skip "needs root and FUSE"
nvidia-smi -L >/dev/null 2>&1 || skip "no GPU"
. "$b/share/gpu-rig.sh"
rig_mount "$proto" --criu-plugins "$b/criu-plugins" ||
	{ for i in 1 2; do echo "not ok $i - phosfs did not mount (bundle $b)"; done; exit 1; }
# Sends SIGUSR1 and waits for the count of "verify ok" lines to pass $2.
verify() { # PID COUNT OUT
	kill -USR1 "$1"
	for _ in $(seq 600); do
		grep -q "verify FAILED" "$3" && return 1
		[ "$(grep -c '^verify ok' "$3")" -gt "$2" ] && return 0
		sleep 0.05
	done
	return 1
}

# 1. cow_app
app="cow_app ($mib MiB)"
if [ "${PHOS_COW_HOST:-0}" = 1 ]; then
	app="host_writer ($mib MiB of host memory, a pinned buffer the GPU writes)"
	pid=$(start "$work/pid1" "$b/apps/host_writer" "$mib")
else
	pid=$(start "$work/pid1" "$b/apps/cow_app" "$b/apps/cow.cubin" "$mib" "$RANDOM")
fi
out=$store/run/$pid.out good=0 prev=
if wait_line "$out" "^ops 200" 120; then
	for i in $(seq "$iters"); do
		sleep "0.$((RANDOM % 900))"
		how=
		[ "$proto" = recopy ] && [ "$i" = "$iters" ] && how=" kill"
		echo "checkpoint $proto name=c$i$how" >"$mnt/$pid/ctl" || { echo "# the ctl write of c$i failed"; break; }
		for _ in $(seq 1200); do grep -q '^job: none' "$mnt/$pid/status" && break; sleep 0.05; done
		if ! grep -q "^last job: checkpoint $proto name=c$i$how: done" "$mnt/$pid/status"; then
			echo "# checkpoint c$i did not end well:"
			grep -E '^(job|last job|step|error)' "$mnt/$pid/status" | sed 's/^/#   /'
			tail -5 "$store/run/$pid.err" 2>/dev/null | sed 's/^/#   app: /'
			break
		fi
		grep -E '^(stall ms|steps ms|off gpu at|published at|cow |safety|recopy)' "$mnt/$pid/status" | tr '\n' ';' | sed 's/^/# /'
		echo
		n=$(grep -c '^verify ok' "$out")
		if [ -z "$how" ]; then
			verify "$pid" "$n" "$out" || { echo "# the running process failed its check"; break; }
		fi
		kill -9 "$pid" 2>/dev/null # (gone already after a recopy kill)
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
		image=$store/$pid/c$i
		n=$(grep -c '^verify ok' "$out")
		mode=lazy
		[ $((i % 2)) = 0 ] && mode=eager
		pid=$("$phos" restore "$image" "$mode" 2>"$work/restore.err") ||
			{ echo "# the $mode restore of c$i failed: $(cat "$work/restore.err")"; break; }
		follow "$pid" || { echo "# the restore of c$i gave no live process ($pid)"; break; }
		verify "$pid" "$n" "$out" || { echo "# the restore of c$i failed its check"; break; }
		settled || { echo "# the restore of c$i did not end"; break; }
		[ -n "$prev" ] && rm -rf "$prev"
		prev=$image good=$i
	done
fi
tail -3 "$out" | sed 's/^/# /'
kill_job "$pid"
[ "$good" = "$iters" ] &&
	echo "ok 1 - $iters $proto checkpoints of $app at random moments, restored lazy and eager in turn: each restore is the state at $state_at, byte for byte" ||
	echo "not ok 1 - $app: $good of $iters $proto iterations were exact"
if [ "${PHOS_COW_HOST:-0}" = 1 ]; then
	echo "ok 2 # skip host_writer runs case 1 alone"
	exit 0
fi

# 2. PyTorch, cow every 2 s for 60 s
if ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	echo "ok 2 # skip no PyTorch with CUDA"
	exit 0
fi
steps=1500
plain=$(python3 "$src/examples/pytorch/train_loader.py" --steps $steps --workers 0 2>&1)
pid=$(start "$work/pid2" python3 "$src/examples/pytorch/train_loader.py" --steps $steps --workers 0 --sleep 0.03)
out=$store/run/$pid.out ok=0 taken=0
if [ "$proto" = recopy ] && wait_line "$out" "^step 20 " 180; then
	sleep 30
	"$phos" checkpoint "$pid" recopy --kill --wait >/dev/null && taken=1
	grep -E '^(stall ms|steps ms|off gpu at|published at|recopy)' "$mnt/$pid/status" | sed 's/^/# /'
	at=$(grep -c '^step' "$out")
	for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$pid" 2>/dev/null && taken=0 # recopy kill ends it
	rpid=$("$phos" restore "$mnt/$pid/checkpoints/latest")
	back=0
	follow "$rpid" && back=1
	settled
	wait_line "$out" "^step $((steps - 1)) " 600
	bad=$(grep '^step' "$out" | sort -u | grep -vxF -f <(printf '%s\n' "$plain") | wc -l)
	echo "# recopy kill after 30 s at $at step lines; restored (lazily) $rpid (was $pid); $bad lines differ"
	pid=$rpid
	[ "$back" = 1 ] && [ "$taken" = 1 ] && [ "$bad" = 0 ] && grep -q "^step $((steps - 1)) " "$out" && ok=1
elif wait_line "$out" "^step 20 " 180; then
	end=$((SECONDS + 60))
	# one every 2 s, or at once when the last one took longer
	while [ $SECONDS -lt $end ]; do
		t=$(date +%s%N)
		"$phos" checkpoint "$pid" --wait >/dev/null && taken=$((taken + 1))
		left=$((2000 - ($(date +%s%N) - t) / 1000000))
		[ $left -gt 0 ] && sleep "$(printf '%d.%03d' $((left / 1000)) $((left % 1000)))"
	done
	grep -E '^(stall ms|steps ms|off gpu at|published at|cow |safety)' "$mnt/$pid/status" | sed 's/^/# /'
	at=$(grep -c '^step' "$out")
	kill_job "$pid"
	rpid=$("$phos" restore "$mnt/$pid/checkpoints/latest")
	back=0
	follow "$rpid" && back=1
	wait_line "$out" "^step $((steps - 1)) " 600
	bad=$(grep '^step' "$out" | sort -u | grep -vxF -f <(printf '%s\n' "$plain") | wc -l)
	echo "# $taken checkpoints in 60 s; killed at $at step lines; restored $rpid (was $pid); $bad lines differ"
	pid=$rpid
	[ "$back" = 1 ] && [ "$taken" -ge 20 ] && [ "$bad" = 0 ] && grep -q "^step $((steps - 1)) " "$out" && ok=1
fi
kill_job "$pid"
what="checkpointed with cow every 2 s for 60 s, killed and restored from the latest"
[ "$proto" = recopy ] && what="migrated with recopy kill after 30 s and restored"
[ $ok = 1 ] &&
	echo "ok 2 - PyTorch $what: the losses continue exactly" ||
	echo "not ok 2 - PyTorch $what: the losses did not continue exactly"
