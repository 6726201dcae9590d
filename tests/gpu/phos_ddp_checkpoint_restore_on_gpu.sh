#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# A two-rank DDP job (torchrun, NCCL, examples/pytorch/train_ddp.py: a
# small transformer), with default NCCL settings but for the multicast
# variables, under a real phosfs mount, checkpointed and restored whole:
# torchrun's agent, its TCP store and both ranks.
#   1. an uninterrupted run, untraced (PHOS_TRACE=0), gives the reference
#      losses and parameter checksum;
#   2. the job is checkpointed with cow every PHOS_DDP_EVERY seconds (5)
#      for PHOS_DDP_SECONDS (60): each checkpoint succeeds and the job
#      trains on;
#   3. killed, it is restored lazily from the last image at once (the
#      restore ends the closed connections, in TIME_WAIT, that hold the
#      job's ports) and trains on;
#   4. checkpointed with recopy --kill, it is restored eagerly with its
#      GPUs swapped (--device 0=1,1=0) and trains to the end;
#   5. every loss it printed, before and after each restore, and its
#      parameter checksum equal the reference's.
# Prints each checkpoint's stall and cut. Needs root, FUSE, two GPUs (it
# skips on one) and PyTorch. PHOS_KEEP_LOGS=DIR keeps phosfs's log there.
b=${PHOS_BUNDLE:-gpu-bundle}
src=${PHOS_SRCDIR:-$b/..}
every=${PHOS_DDP_EVERY:-5}
secs=${PHOS_DDP_SECONDS:-60}
steps=${PHOS_DDP_STEPS:-$((secs * 20 + 300))}
n=5
echo "1..$n"
skip() { for i in $(seq $n); do echo "ok $i # skip $1"; done; exit 0; }
fail_all() { for i in $(seq $n); do echo "not ok $i - $1"; done; exit 1; }
. "$b/share/gpu-rig.sh"
ddp_rig ddp-restore
train=(python3 -m torch.distributed.run --standalone --nproc_per_node 2 "$src/examples/pytorch/train_ddp.py"
	--steps "$steps" --sleep 0.05)

# 1. The reference.
reference "${train[@]}" || fail_all "the reference run did not finish"


# 2. cow every few seconds while it trains.
pid=$(start "$work/pid1" "${train[@]}")
out=$store/run/$pid.out
wait_line "$out" "^step 5 " 300 || echo "# the job did not reach step 5: $(tail -3 "$store/run/$pid.err" 2>/dev/null)"
good=0 tries=0 last=
t_end=$(awk -v a="$(now)" -v s="$secs" 'BEGIN {printf "%.0f", a + s}')
while [ "$(printf '%.0f' "$(now)")" -lt "$t_end" ] && ! grep -q '^params' "$out"; do
	tries=$((tries + 1))
	"$phos" checkpoint "$pid" cow --name "c$tries" --wait >"$work/ck.out" 2>"$work/ck.err"
	rc=$?
	cut=$(grep -o 'nccl cut: .*' "$mnt/$pid/status" | head -1)
	echo "# cow c$tries: rc $rc, stall $(stall "$pid") ms, at $(grep -c '^step' "$out") steps; $cut $(grep -o 'steps ms: .*' "$mnt/$pid/status") $(grep -E "^(criu dump ms|criu pages|park ms|cow tables ms)" "$mnt/$pid/status" | tr "\n" " ") $(tr '\n' ' ' <"$work/ck.err")"
	[ $rc = 0 ] && good=$((good + 1)) last=c$tries
	sleep "$every"
done
if [ "$good" = "$tries" ] && [ "$tries" -gt 0 ] && alive "$pid"; then
	echo "ok 1 - $good cow checkpoints, one every $every s for $secs s, each succeeded and the job trained on"
else
	echo "not ok 1 - $good of $tries cow checkpoints succeeded (job alive: $(alive "$pid" && echo yes || echo no))"
fi

# 3. Killed, restored lazily from the last image (once every rank is
# gone: a process with GPU memory takes a while to end).
# The job's TCP connections (to torchrun's store, NCCL's bootstrap)
# were closed by the kill, and their ends stay in TIME_WAIT for a
# minute: the restore ends those that hold the job's addresses.
# torchrun starts its workers in sessions of their own: every member of
# the image is killed by pid.
ranks=$([ -n "$last" ] && image_members "$store/$pid/$last")
kill_job "$pid"
# shellcheck disable=SC2086 # one pid each
[ -n "$ranks" ] && kill -9 $ranks 2>/dev/null
# shellcheck disable=SC2086
ended $ranks
time_waits
back=
if [ -n "$last" ]; then
	back=$("$phos" restore "$store/$pid/$last" lazy --wait 2>"$work/rs.err")
	settled
fi
# CRIU restores a tree into a time namespace of its own where the kernel
# has them, so that its monotonic clocks go on from the dump (PyTorch's
# NCCL heartbeat and watchdog count on them): say whether it did.
[ -n "$back" ] && echo "# time namespace: restored $(readlink "/proc/$back/ns/time" 2>/dev/null), this machine's $(readlink /proc/self/ns/time)"
if follow "$back" && wait_line "$out" "^step $(($(grep -c '^step' "$out") + 20)) " 300; then
	echo "ok 2 - killed and restored lazily from $last, the job trains on (pid $back)"
else
	echo "not ok 2 - the job did not come back from $last: $(tr '\n' ' ' <"$work/rs.err")"
fi

# 4. recopy --kill, restored with the GPUs swapped.
ranks=
"$phos" checkpoint "$back" recopy --kill --name moved --wait >"$work/ck.out" 2>"$work/ck.err"
rc=$?
echo "# recopy --kill: rc $rc, stall $(stall "$back") ms; $(tr '\n' ' ' <"$work/ck.err")"
[ $rc = 0 ] && ranks=$(image_members "$store/$back/moved")
# shellcheck disable=SC2086 # one pid each
ended $back $ranks
again=
[ $rc = 0 ] && again=$("$phos" restore "$store/$back/moved" eager --device 0=1,1=0 --wait 2>"$work/rs.err")
settled
if follow "$again" && wait_line "$out" "^params" 900; then
	echo "ok 3 - checkpointed with recopy --kill and restored onto the GPUs swapped, the job trains to its end"
else
	echo "not ok 3 - the job did not finish after recopy --kill and a restore with the GPUs swapped: $(tr '\n' ' ' <"$work/rs.err") $(tail -3 "$store/run/$pid.err" | tr '\n' ' ')"
fi

# 5. Every line as the reference's.
same_as_reference 4 "$out"
bad=0
for d in "$store"/*/c* "$store"/*/moved; do
	[ -d "$d" ] || continue
	"$b/bin/phos-image" verify "$d" >/dev/null 2>&1 || bad=1
done
[ $bad = 0 ] && echo "ok 5 - every image verifies" || echo "not ok 5 - an image does not verify"
