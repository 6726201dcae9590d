#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# phos run --on-signal-timeout: a checkpoint that a signal asked for and
# that does not end in time is cancelled, and the signal goes on, so a
# scheduler's grace period is not spent waiting for it. A real phosfs,
# examples/counter under the tracer on simcuda, and a CRIU whose dump
# hangs (it never starts) while $hang exists, or holds the tree 4 s after
# dumping it (a post-dump action script) while $hold exists:
#
#   1. USR1=checkpoint, --on-signal-timeout 2: phos run says the
#      checkpoint did not end in 2 s and was cancelled, and passes USR1 on
#      within a few seconds (the counter checks its device memory);
#   2. the job runs on, and the cancel stopped the hung CRIU at once
#      (phosfs's own dump deadline is 600 s);
#   3. nothing is published: no image, and the job's name links none;
#      status says the checkpoint was cancelled;
#   4. with CRIU well again, the next USR1 checkpoints the job: the
#      cancelled one left nothing in the way;
#   5. a cancel that comes while CRIU holds the tree does not kill CRIU
#      (its code may be in the job's processes): CRIU lets go of the tree,
#      and the job runs on, with USR1;
#   6. TERM=checkpoint-kill with the dump hung: TERM goes on after 2 s,
#      ends the job, and phos run exits with its status (143).
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/phos_run_rig.bash
. "${PHOS_SRCDIR:-$here/../..}/tests/phos_run_rig.bash"
rig_require
real_criu=$rig_criu
rig_criu=$(mktemp /tmp/phos-hung-criu.XXXXXX)
hang=$rig_criu.hang hold=$rig_criu.hold
tag=phos-hung-criu-$(basename "$rig_criu")
cat >"$rig_criu" <<EOF
#!/bin/bash
# A CRIU whose dumps hang, never starting, while $hang exists, and that
# holds the tree for 4 s after dumping it while $hold exists.
if [[ " \$* " == *" dump "* ]]; then
	[ -e '$hang' ] && exec -a '$tag' sleep 600
	[ -e '$hold' ] && exec '$real_criu' "\$@" --action-script '$rig_criu.script'
fi
exec '$real_criu' "\$@"
EOF
cat >"$rig_criu.script" <<EOF
#!/bin/sh
[ "\$CRTOOLS_SCRIPT_ACTION" = post-dump ] && touch '$hold.held' && sleep 4
exit 0
EOF
chmod +x "$rig_criu" "$rig_criu.script"
rig_mount
trap 'pkill -f "^$tag" 2>/dev/null; rm -f "$rig_criu" "$rig_criu.script" "$hang" "$hold" "$hold.held"; rig_cleanup' EXIT

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'; }

"$phos" run --name hung --on-signal-timeout 2 --on-signal USR1=checkpoint --on-signal TERM=checkpoint-kill \
	-- "$counter" 8 >"$work/pid" 2>"$work/run.err" &
run=$!
pid=$(started "$work/pid")
out=$store/run/$pid.out
wait_line "$out" '^count 20$' 20

# 1. USR1 while CRIU hangs.
touch "$hang"
t0=$(now)
kill -USR1 "$run"
wait_line "$out" '^verify ok count' 20
t1=$(now)
check 'grep -Eq "SIGUSR1: the checkpoint of process $pid failed: .*did not end in 2 s \(--on-signal-timeout\); cancelled; passing SIGUSR1 on" "$work/run.err" &&
	awk -v d="$(secs "$t0" "$t1")" "BEGIN {exit !(d >= 2 && d < 8)}"' \
	"USR1: the checkpoint did not end in 2 s; phos run cancelled it and passed USR1 on ($(secs "$t0" "$t1") s)"

# 2. The job runs on; CRIU was stopped.
c=$(last_count "$out")
gone=0
for _ in $(seq 60); do pgrep -f "^$tag" >/dev/null || { gone=1; break; }; sleep 0.05; done
check 'wait_line "$out" "^count $((c + 10))\$" 20 && alive "$pid" && [ $gone = 1 ]' \
	"the job runs on, and the cancel stopped the hung CRIU"

# 3. Nothing published; status says why.
wait_line "$mnt/$pid/status" '^job: none' 5
last=$(grep '^last job:' "$mnt/$pid/status")
err=$(grep '^error:' "$mnt/$pid/status")
check '[ ! -e "$store/$pid/1/manifest.phos" ] && [ ! -e "$store/jobs/hung/latest" ] && [[ $last == *failed ]] &&
	[[ $err == *"failed: cancelled: criu dump was stopped"* ]]' \
	"nothing is published, and status says the checkpoint was cancelled ($last; $err)"

# 4. CRIU well again: the next USR1 checkpoints the job.
rm -f "$hang"
kill -USR1 "$run"
wait_line "$work/run.err" "SIGUSR1: checkpoint of process $pid done" 30
latest=$(readlink -f "$store/jobs/hung/latest" 2>/dev/null)
check '[ -n "$latest" ] && "$(dirname "$phos")/phos-image" verify "$latest" >/dev/null && alive "$pid"' \
	"with CRIU well again, the next USR1 publishes a checkpoint ($latest), and the job runs on"

# 5. A cancel while CRIU holds the tree: CRIU finishes, the job runs on.
touch "$hold"
verified=$(grep -c '^verify ok' "$out")
kill -USR1 "$run"
wait_line "$work/run.err" "SIGUSR1: the checkpoint of process $pid failed: .*cancelled; passing SIGUSR1 on" 20
wait_line "$mnt/$pid/status" '^job: none' 10
err=$(grep '^error:' "$mnt/$pid/status")
c=$(last_count "$out")
check '[ -e "$hold.held" ] && [[ $err != *"criu dump was stopped"* ]] && wait_line "$out" "^count $((c + 10))\$" 20 &&
	[ "$(grep -c "^verify ok" "$out")" -gt "$verified" ] && alive "$pid"' \
	"a cancel while CRIU held the tree left CRIU to let go of it; the job got USR1 and runs on ($err)"
rm -f "$hold"

# 6. TERM=checkpoint-kill while CRIU hangs: TERM goes on, and ends the job.
touch "$hang"
t0=$(now)
kill -TERM "$run"
wait_gone "$run" 60 || kill -9 "$run"
wait "$run"
rc=$?
t1=$(now)
check '[ "$rc" = 143 ] && ! alive "$pid" && grep -q "SIGTERM: the checkpoint of process $pid failed: .*cancelled; passing SIGTERM on" "$work/run.err"' \
	"TERM=checkpoint-kill with CRIU hung: TERM went on after the timeout and ended the job (phos run $rc, in $(secs "$t0" "$t1") s)"
sed 's/^/# phos run: /' "$work/run.err"
done_testing
