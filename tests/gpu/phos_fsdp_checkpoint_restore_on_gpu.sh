#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# A two-rank FSDP job (torchrun, NCCL, examples/pytorch/train_fsdp.py:
# the transformer of train_ddp.py sharded with fully_shard), with default
# NCCL settings but for the multicast variables, under a real phosfs
# mount, in a pid namespace of its own:
#   1. an uninterrupted run, untraced (PHOS_TRACE=0), gives the reference
#      losses and parameter checksum;
#   2. the job is checkpointed once with cow while it trains, and trains
#      on;
#   3. killed, it is restored eagerly from that image at once (the
#      restore ends the closed connections, in TIME_WAIT, that hold the
#      job's ports) and trains to its end;
#   4. every loss it printed, before and after the restore, and its
#      parameter checksum equal the reference's.
# Needs root, FUSE, two GPUs (it skips on one) and PyTorch.
# PHOS_KEEP_LOGS=DIR keeps phosfs's log, the job's stderr and CRIU's logs.
b=${PHOS_BUNDLE:-gpu-bundle}
src=${PHOS_SRCDIR:-$b/..}
steps=${PHOS_FSDP_STEPS:-300}
n=4
echo "1..$n"
skip() { for i in $(seq $n); do echo "ok $i # skip $1"; done; exit 0; }
fail_all() { for i in $(seq $n); do echo "not ok $i - $1"; done; exit 1; }
. "$b/share/gpu-rig.sh"
ddp_rig fsdp
train=(python3 -m torch.distributed.run --standalone --nproc_per_node 2 "$src/examples/pytorch/train_fsdp.py"
	--steps "$steps" --sleep 0.05)

reference "${train[@]}" || fail_all "the reference run did not finish"

pid=$(start "$work/pid1" "${train[@]}")
out=$store/run/$pid.out
wait_line "$out" "^step 20 " 300 || echo "# the job did not reach step 20: $(tail -3 "$store/run/$pid.err" 2>/dev/null)"
"$phos" checkpoint "$pid" cow --name one --wait >"$work/ck.out" 2>"$work/ck.err"
rc=$?
echo "# cow: rc $rc, stall $(stall "$pid") ms; $(grep -o 'nccl cut: .*' "$mnt/$pid/status" | head -1) $(grep -E "^(steps ms|criu dump ms|criu pages|park ms|cow tables ms)" "$mnt/$pid/status" | tr "\n" " ") $(tr '\n' ' ' <"$work/ck.err")"
at=$(grep -c '^step' "$out")
if [ $rc = 0 ] && wait_line "$out" "^step $((at + 10)) " 120; then
	echo "ok 1 - one cow checkpoint of the FSDP job succeeds, and it trains on"
else
	echo "not ok 1 - the cow checkpoint of the FSDP job failed, or the job stopped"
fi

ranks=$([ $rc = 0 ] && image_members "$store/$pid/one")
kill_job "$pid"
# shellcheck disable=SC2086 # one pid each
ended $ranks
time_waits
back=
[ $rc = 0 ] && back=$("$phos" restore "$store/$pid/one" eager --wait 2>"$work/rs.err")
settled
if follow "$back" && wait_line "$out" "^params" 900; then
	echo "ok 2 - killed and restored from the image, the job trains to its end (pid $back)"
else
	echo "not ok 2 - the job did not come back and finish: $(tr '\n' ' ' <"$work/rs.err" 2>/dev/null) $(tail -3 "$store/run/$pid.err" | tr '\n' ' ')"
fi
same_as_reference 3 "$out"
"$b/bin/phos-image" verify "$store/$pid/one" >/dev/null 2>&1 && echo "ok 4 - the image verifies" ||
	echo "not ok 4 - the image does not verify"
