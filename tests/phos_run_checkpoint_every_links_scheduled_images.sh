#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# phos run --checkpoint-every: phosfs takes the job's checkpoints on
# schedule, and phos run links each it publishes under the job's name,
# keeping the newest --keep, so that --restore-from latest finds the
# newest. A real phosfs, and examples/counter under the tracer on simcuda:
#
#   1. a malformed --checkpoint-every or --mtbf, or --mtbf without auto,
#      is refused (exit 2) before anything starts, saying why;
#   2. --checkpoint-every 2 --keep 2: status shows the interval, fixed;
#   3. checkpoints come every 2 s, each linked as the job's latest;
#   4. the job's name keeps the newest 2, and the older images are gone;
#   5. a checkpoint on a signal between them is linked in order too;
#   6. --checkpoint-every auto --mtbf 1h: status says how auto chooses.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/phos_run_rig.bash
. "${PHOS_SRCDIR:-$here/../..}/tests/phos_run_rig.bash"
rig_require
rig_mount

# 1. Refused before anything starts.
bad=0
for args in "--checkpoint-every 5x" "--checkpoint-every 0" "--checkpoint-every 10 --mtbf 1h" "--mtbf 1h" \
	"--checkpoint-every auto --mtbf soon"; do
	# shellcheck disable=SC2086 # the options, split on purpose
	"$phos" run --name bad $args -- /bin/true >"$work/bad.out" 2>"$work/bad.err"
	rc=$?
	if [ "$rc" != 2 ] || [ -s "$work/bad.out" ] || ! grep -qE -- '--(checkpoint-every|mtbf)' "$work/bad.err"; then
		echo "# $args: exit $rc, $(cat "$work/bad.err")"
		bad=1
	fi
done
check '[ $bad = 0 ]' "a malformed --checkpoint-every or --mtbf, or --mtbf without auto, is refused with exit 2, saying why"

# 2-5. Every 2 s, the newest 2 kept.
"$phos" run --name every --checkpoint-every 2 --keep 2 --on-signal USR1=checkpoint -- "$counter" 8 \
	>"$work/pid" 2>"$work/run.err" &
run=$!
pid=$(started "$work/pid")
wait_line "$store/run/$pid.out" '^count 5$' 20
check 'grep -q "^checkpoint interval s: 2$" "$mnt/$pid/status" && grep -q "^checkpoint interval why: fixed$" "$mnt/$pid/status"' \
	"status shows the job's interval (2 s) and why (fixed)"
jobs=$store/jobs/every
for _ in $(seq 150); do
	[ "$(readlink "$jobs/latest" 2>/dev/null)" -ge 3 ] 2>/dev/null && break
	sleep 0.1
done
n=$(readlink "$jobs/latest")
check '[ "${n:-0}" -ge 3 ] && [ "$(readlink -f "$jobs/$n")" = "$(readlink -f "$store/$pid/$(ls "$store/$pid" | grep -E "^[0-9]+$" | sort -n | tail -1)")" ]' \
	"phosfs's scheduled checkpoints are linked as the job's latest, in order (latest -> $n)"
links=$(find "$jobs" -maxdepth 1 -name '[0-9]*' | wc -l)
images=$(find "$store/$pid" -maxdepth 1 -name '[0-9]*' | wc -l)
check '[ "$links" = 2 ] && [ "$images" -le 3 ]' \
	"the job's name keeps the newest 2 ($links links) and the older images are gone ($images in the store)"
kill -USR1 "$run"
wait_line "$work/run.err" 'SIGUSR1: checkpoint of process [0-9]+ done' 30
sleep 2.5
last=$(readlink -f "$jobs/$(readlink "$jobs/latest")")
newest=$(readlink -f "$store/$pid/$(ls "$store/$pid" | grep -E '^[0-9]+$' | sort -n | tail -1)")
dups=$(for l in "$jobs"/[0-9]*; do readlink -f "$l"; done | sort | uniq -d | wc -l)
check '[ "$last" = "$newest" ] && [ "$dups" = 0 ]' \
	"a checkpoint on a signal between them is linked once, and latest stays the newest ($(basename "$last"))"
kill -TERM "$run"
wait "$run"

# 6. auto.
"$phos" run --name auto --checkpoint-every auto --mtbf 1h -- "$counter" 8 >"$work/pid2" 2>"$work/run2.err" &
run=$!
pid=$(started "$work/pid2")
wait_line "$store/run/$pid.out" '^count 3$' 20
check 'grep -q "^checkpoint interval why: auto: .*MTBF 3600 s" "$mnt/$pid/status"' \
	"--checkpoint-every auto --mtbf 1h: status says how auto chooses ($(sed -n 's/^checkpoint interval why: //p' "$mnt/$pid/status"))"
kill -TERM "$run"
wait "$run"
done_testing
