#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# phos run --on-signal: a signal sent to phos run is a checkpoint first,
# through phosfs, and only then goes on to the job. A real phosfs, and
# examples/counter under the tracer on simcuda:
#
#   1. USR1=checkpoint: the image is published, the job's name links it
#      (STORE/jobs/NAME/latest), and the job then gets USR1 (the counter
#      checks its device memory) and runs on;
#   2. USR2=cow,nopass: a checkpoint, and the job, which USR2 would end,
#      never gets it;
#   3. TERM=stop: a checkpoint, then TERM ends the job (had TERM gone
#      first, there would be no process to checkpoint), and phos run
#      exits with the job's status; --keep 2 dropped the oldest image;
#   4. HUP=checkpoint-kill: the checkpoint ends the job; phos run exits
#      128+1, and the image restores with the count it had;
#   5. a checkpoint that fails (recopy of a process without the tracer)
#      says why on stderr, and the signal still goes on;
#   6. phos status --json and phos ls --json print phosfs's status.json.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/phos_run_rig.bash
. "${PHOS_SRCDIR:-$here/../..}/tests/phos_run_rig.bash"
rig_require
rig_mount

# 1. USR1: checkpoint, then the job gets it.
"$phos" run --name sig --on-signal USR1=checkpoint --on-signal USR2=cow,nopass --on-signal TERM=stop \
	-- "$counter" 8 >"$work/pid" 2>"$work/run.err" &
run=$!
pid=$(started "$work/pid")
out=$store/run/$pid.out
wait_line "$out" '^count 20$' 20
kill -USR1 "$run"
wait_line "$work/run.err" 'SIGUSR1: checkpoint of process [0-9]+ done' 30
image=$store/$pid/1
check '[ -f "$image/manifest.phos" ] && "$(dirname "$phos")/phos-image" verify "$image" >/dev/null' \
	"USR1=checkpoint: the image $image is published, and it verifies"
check '[ "$(readlink "$store/jobs/sig/latest")" = 1 ] && [ "$(readlink "$store/jobs/sig/1")" = "$image" ]' \
	"the job's name links it: STORE/jobs/sig/latest -> 1 -> the image"
check 'wait_line "$out" "^verify ok count" 20' "then the job got USR1 (the counter checked its device memory)"
c=$(last_count "$out")
check 'wait_line "$out" "^count $((c + 10))\$" 20 && alive "$pid"' "and it runs on"

# 2. USR2 with nopass: the counter would die of it.
kill -USR2 "$run"
wait_line "$work/run.err" 'SIGUSR2: checkpoint of process [0-9]+ done' 30
c=$(last_count "$out")
check '[ -f "$store/$pid/2/manifest.phos" ] && wait_line "$out" "^count $((c + 10))\$" 20 && alive "$pid"' \
	"USR2=cow,nopass: a checkpoint, and the job, which USR2 ends, never got it"

# 3. TERM: checkpoint, then TERM ends the job.
kill -TERM "$run"
wait "$run"
rc=$?
check '[ "$rc" = 143 ] && [ -f "$store/$pid/3/manifest.phos" ] && ! alive "$pid"' \
	"TERM=stop: a checkpoint, then TERM ended the job, and phos run exited with its status (143: $rc)"
check 'grep -q "SIGTERM: checkpoint of process $pid done" "$work/run.err"' "phos run said so on stderr"
check '[ "$(readlink "$store/jobs/sig/latest")" = 3 ] && [ ! -e "$store/jobs/sig/1" ] && [ ! -e "$image" ] &&
	[ -e "$store/jobs/sig/2" ]' "--keep 2 (the default) kept the newest two, and removed the oldest image"
sed 's/^/# phos run: /' "$work/run.err"

# 4. HUP=checkpoint-kill: the checkpoint ends the job.
"$phos" run --name kill --on-signal HUP=checkpoint-kill -- "$counter" 8 >"$work/pid2" 2>"$work/run2.err" &
run=$!
pid=$(started "$work/pid2")
init=$(job_init "$pid")
out=$store/run/$pid.out
wait_line "$out" '^count 20$' 20
kill -HUP "$run"
wait "$run"
rc=$?
c=$(last_count "$out")
check '[ "$rc" = 129 ] && ! alive "$pid" && ! alive "$init" && [ "$(readlink "$store/jobs/kill/latest")" = 1 ]' \
	"HUP=checkpoint-kill: the checkpoint ended the job (with its init), phos run exited 129 ($rc), latest names it"
new=$("$phos" restore "$store/jobs/kill/latest" 2>"$work/restore.err")
note "$new"
check 'alive "$new" && wait_line "$out" "^count $((c + 10))\$" 20' \
	"its image restores, and the job counts on from $c"
init=$(job_init "$new") && kill -9 "$init"

# 5. A checkpoint that fails: the signal still goes on.
"$phos" run --on-signal USR1=recopy -- sleep 600 >"$work/pid3" 2>"$work/run3.err" &
run=$!
started "$work/pid3" >/dev/null
kill -USR1 "$run"
wait "$run"
rc=$?
check '[ "$rc" = 138 ] && grep -q "SIGUSR1: the checkpoint of process [0-9]* failed: .*needs the tracer.*; passing SIGUSR1 on" "$work/run3.err"' \
	"a checkpoint that fails says why, and the signal still goes on (sleep ended by USR1: $rc)"
sed 's/^/# phos run: /' "$work/run3.err"

# 6. --json
"$phos" run --on-signal TERM=checkpoint -- "$counter" 8 >"$work/pid4" 2>/dev/null &
run=$!
pid=$(started "$work/pid4")
check '"$phos" status --json "$pid" | python3 -c "import json,sys; j=json.load(sys.stdin); assert j[\"pid\"] == $pid, j"' \
	"phos status --json PID prints its status.json"
check '"$phos" ls --json | python3 -c "import json,sys; a=json.load(sys.stdin); assert $pid in [j[\"pid\"] for j in a], a"' \
	"phos ls --json prints a JSON array of every process's status.json"
kill -TERM "$run"
wait "$run"
done_testing
