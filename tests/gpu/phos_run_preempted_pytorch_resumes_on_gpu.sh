#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Preemption of a PyTorch training job on a real GPU, as a scheduler does
# it: the job runs under
#   phos run --name NAME --on-signal TERM=recopy-kill -- python3 train_mlp.py
# and phos run is sent SIGTERM mid-training. phos run takes a recopy
# checkpoint, which ends the job, and exits. The requeued job is the same
# line with --restore-from latest: it restores the newest image of NAME,
# and the job's losses continue exactly (each step's line is the
# uninterrupted run's, to the last step).
#   1. SIGTERM: the checkpoint is published, NAME's latest names it, and
#      the job and phos run end;
#   2. --restore-from latest restores it (not a fresh start);
#   3. its losses equal the uninterrupted run's, every step to the last;
#   4. phos run exits with the job's status (0).
# Needs root, FUSE, a GPU and PyTorch.
b=${PHOS_BUNDLE:-gpu-bundle}
src=${PHOS_SRCDIR:-$b/..}
echo "1..4"
skip() {
	for i in 1 2 3 4; do echo "ok $i # skip $1"; done
	exit 0
}
[ "$(id -u)" = 0 ] && [ -e /dev/fuse ] || skip "needs root and FUSE"
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
	skip "no PyTorch with CUDA"
. "$b/share/gpu-rig.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
rig_mount preempt ||
	{ for i in 1 2 3 4; do echo "not ok $i - phosfs did not mount (bundle $b)"; done; exit 1; }
train=(python3 "$src/examples/pytorch/train_mlp.py" --steps 600 --sleep 0.05)

plain=$(timeout 600 python3 "$src/examples/pytorch/train_mlp.py" --steps 600 2>&1 | grep '^step')
if [ "$(printf '%s\n' "$plain" | grep -c "^step")" != 600 ]; then
	for i in 1 2 3 4; do echo "not ok $i - the uninterrupted run did not finish"; done
	exit 1
fi

# 1. The first run, sent SIGTERM mid-training.
"$phos" run --pid-ns --name preempt --on-signal TERM=recopy-kill -- "${train[@]}" >"$work/run1.out" 2>"$work/run1.err" &
run=$!
wait_line "$work/run1.out" '^[0-9][0-9]*$' 60
pid=$(head -1 "$work/run1.out")
follow "$pid"
out=$store/run/$pid.out
wait_line "$out" '^step 60 ' 300 || echo "# the job did not reach step 60: $(tail -3 "$store/run/$pid.err" 2>/dev/null)"
# What the first GPU run of this test needs explained: phos run was gone here.
echo "# before SIGTERM: phos run $run $(ps -o stat= -p "$run" 2>/dev/null || echo gone), job $pid $(ps -o stat= -p "$pid" 2>/dev/null || echo gone), $(grep -c '^step' "$out") step lines"
t0=$(now)
kill -TERM "$run"
wait "$run"
rc1=$?
t1=$(now)
sed 's/^/# run 1: /' "$work/run1.err"
latest=$(readlink -f "$store/jobs/preempt/latest" 2>/dev/null)
ok=0
[ -n "$latest" ] && "$b/bin/phos-image" verify "$latest" >/dev/null 2>&1 && ! alive "$pid" && ok=1
[ $ok = 1 ] && echo "ok 1 - SIGTERM: recopy-kill published $latest, named by the job's latest, and ended the job (phos run $rc1, in $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}') s)" ||
	echo "not ok 1 - SIGTERM did not leave a checkpoint of the job and end it (phos run $rc1; latest '$latest')"
steps_before=$(grep -c '^step' "$out")

# 2-4. The requeued job: the same line, with --restore-from latest.
"$phos" run --pid-ns --name preempt --on-signal TERM=recopy-kill --restore-from latest -- "${train[@]}" \
	>"$work/run2.out" 2>"$work/run2.err" &
run=$!
wait_line "$work/run2.out" '^[0-9][0-9]*$' 120
rpid=$(head -1 "$work/run2.out")
follow "$rpid"
restored=0
grep -qi 'restor' "$work/run2.err" && [ ! -s "$store/run/$rpid.out" ] && restored=1
[ $restored = 1 ] && echo "ok 2 - --restore-from latest restored the job (now $rpid, was $pid), not a fresh start" ||
	echo "not ok 2 - --restore-from latest did not restore the job"
wait_line "$out" '^step 599 ' 600
wait "$run"
rc2=$?
sed 's/^/# run 2: /' "$work/run2.err"
echo "# $steps_before step lines before SIGTERM, $(grep -c '^step' "$out") in all"
# Every line, from before SIGTERM and after the restore, is the
# uninterrupted run's line for that step, and every step is there.
bad=$(grep '^step' "$out" | sort -u | grep -vxF -f <(printf '%s\n' "$plain") | wc -l)
steps=$(grep '^step' "$out" | awk '{print $2}' | sort -un | wc -l)
[ "$bad" = 0 ] && [ "$steps" = 600 ] && echo "ok 3 - its losses equal the uninterrupted run's, all 600 steps" ||
	echo "not ok 3 - its losses differ from the uninterrupted run's ($bad lines differ, $steps of 600 steps)"
[ "$rc2" = 0 ] && echo "ok 4 - phos run exited with the restored job's status (0)" ||
	echo "not ok 4 - phos run exited $rc2, the job's status was 0"
