#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# A two-rank DDP job (torchrun, NCCL, examples/pytorch/train_ddp.py: a
# small transformer), with default NCCL settings but for the multicast
# variables, under a real phosfs mount, checkpointed while it trains with
# a short deadline. Done or failed, no checkpoint may hang or kill it:
#   1. an uninterrupted run, untraced (PHOS_TRACE=0), gives the reference
#      losses and parameters;
#   2. the same job is checkpointed six times while it trains, with stop
#      and cow in turn and --timeout 2: each attempt ends (done or failed)
#      within its deadline and a few seconds, and says why when it fails;
#   3. the job is alive after each;
#   4. its losses and parameter checksum equal the reference's;
#   5. nothing half-made is published: any image there verifies;
#   6. each rank's /phos/PID/nccl lists its communicators with the
#      operations they issued (the tracer interposes PyTorch's NCCL), and
#      the ranks name them alike.
# Prints each attempt's time and answer. Needs root, FUSE, two GPUs (it
# skips on one) and PyTorch. PHOS_KEEP_LOGS=DIR keeps phosfs's log there.
b=${PHOS_BUNDLE:-gpu-bundle}
src=${PHOS_SRCDIR:-$b/..}
steps=${PHOS_DDP_STEPS:-80}
echo "1..6"
skip() { for i in 1 2 3 4 5 6; do echo "ok $i # skip $1"; done; exit 0; }
. "$b/share/gpu-rig.sh"
why=$(ddp_missing)
[ -z "$why" ] || skip "$why"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
rig_mount ddp --criu-plugins "$b/criu-plugins" ||
	{ for i in 1 2 3 4 5 6; do echo "not ok $i - phosfs did not mount (bundle $b)"; done; exit 1; }
train=(python3 -m torch.distributed.run --standalone --nproc_per_node 2 "$src/examples/pytorch/train_ddp.py"
	--steps "$steps" --sleep 0.1)

# 1. The reference.
if ! reference "${train[@]}"; then
	for i in 1 2 3 4 5 6; do echo "not ok $i - the reference run did not finish"; done
	exit 1
fi

# 2-3. Checkpoints while it trains.
pid=$(start "$work/pid1" "${train[@]}")
out=$store/run/$pid.out
wait_line "$out" "^step 5 " 300 || echo "# the job did not reach step 5: $(tail -3 "$store/run/$pid.err" 2>/dev/null)"
# Each rank's communicators, while it trains.
: >"$work/nccl"
for r in $(pgrep -P "$pid"); do
	for _ in $(seq 20); do
		cat "$mnt/$r/nccl" >"$work/one" 2>"$work/one.err" && [ -s "$work/one" ] && break
		sleep 0.5
	done
	[ -s "$work/one.err" ] && echo "# $r/nccl: $(cat "$work/one.err")"
	sed "s/^/$r /" "$work/one" >>"$work/nccl"
done
sed 's/^/# nccl: /' "$work/nccl"
in_time=1 all_alive=1 worst=0 said=1 failed=0
for i in 1 2 3 4 5 6; do
	proto=stop
	[ $((i % 2)) = 0 ] && proto=cow
	t0=$(now)
	"$phos" checkpoint "$pid" "$proto" --name "try$i" --timeout 2 --wait >"$work/ck.out" 2>"$work/ck.err"
	rc=$?
	t1=$(now)
	secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
	echo "# $proto try$i: rc $rc in $secs s: $(cat "$work/ck.out" "$work/ck.err" | tr '\n' ' ')"
	# The deadline, the job process's start and end, and, when it gets
	# that far, the driver's checkpoint and CRIU's dump (about 4 s).
	awk -v s="$secs" 'BEGIN {exit !(s < 2 + 10)}' || in_time=0
	worst=$(awk -v s="$secs" -v w="$worst" 'BEGIN {print (s > w ? s : w)}')
	# A job that trained to its end (params) ended well, not died.
	alive "$pid" || grep -q '^params' "$out" || all_alive=0
	if [ $rc != 0 ]; then
		failed=$((failed + 1))
		grep -q "process [0-9]* " "$work/ck.err" || said=0
	fi
	grep -q '^params' "$out" && break
	sleep 1
done
[ $in_time = 1 ] && echo "ok 1 - each checkpoint of the DDP job ended within its 2 s deadline and 10 s (slowest $worst s)" ||
	echo "not ok 1 - a checkpoint of the DDP job took longer than its deadline and 10 s (slowest $worst s)"
[ $all_alive = 1 ] && echo "ok 2 - the job runs on after each (or to its end)" || echo "not ok 2 - the job died"
wait_line "$out" "^params" 600
train_lines "$out" >"$work/got"
if [ -s "$work/got" ] && cmp -s "$work/ref" "$work/got"; then
	echo "ok 3 - its $(grep -c '^step' "$work/got") losses and parameter checksum equal the uninterrupted run's"
else
	echo "not ok 3 - its losses differ from the uninterrupted run's"
	diff "$work/ref" "$work/got" | head -5 | sed 's/^/# /'
fi
[ $said = 1 ] && echo "ok 4 - each of the $failed failed attempts names the process and why" ||
	echo "not ok 4 - a failed attempt did not say which process and why"
bad=0
for d in "$store/$pid"/try*; do
	[ -d "$d" ] || continue
	"$b/bin/phos-image" verify "$d" >/dev/null 2>&1 || bad=1
done
[ $bad = 0 ] && echo "ok 5 - nothing half-made is published ($(ls -d "$store/$pid"/try* 2>/dev/null | wc -l) images)" ||
	echo "not ok 5 - an image published from the DDP job does not verify"
# Lines "PID NAME RANK SIZE OPS": two ranks, each with a named
# communicator of size 2 that has issued operations, under one name.
awk '$4 == 2 && $5 > 0 && $6 == "" {n[$2] = n[$2] " " $3} END {for (k in n) if (split(n[k], a, " ") == 2 && a[1] != a[2]) ok = 1; exit !ok}' \
	"$work/nccl" && echo "ok 6 - each rank lists its NCCL communicators and their operations; the ranks name them alike" ||
	echo "not ok 6 - the ranks' NCCL communicators are not listed alike"
