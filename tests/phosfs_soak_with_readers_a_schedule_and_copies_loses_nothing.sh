#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# A soak of phosfs as it is used: PHOS_SOAK_CHECKPOINTS cow checkpoints
# (default 200; 50 under ASan) of a job, one after another, while
#   - a reader waits on /events, and another reads /metrics and
#     status.json in a loop;
#   - a schedule takes checkpoints too, every second, and keeps the
#     newest 3 (its prune removes older ones, the hand-made ones too);
#   - a loop copies each numbered image out of /phos/PID/checkpoints/
#     with cp -r, as the README says to;
#   1. every checkpoint is published (but for one in 25 at most, said),
#      and the job runs on;
#   2. no copy that began fails halfway (a prune waits for its readers);
#      copies are checked with phos-image verify;
#   3. the prune still works: once the copies end, the store holds the
#      newest 3 images and latest;
#   4. phosfs's open descriptors and resident memory do not grow.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/phos_run_rig.bash
. "${PHOS_SRCDIR:-$here/../..}/tests/phos_run_rig.bash"
rig_require
rig_mount
n=${PHOS_SOAK_CHECKPOINTS:-200}
image_tool=${PHOS_IMAGE:-$(dirname "$phos")/phos-image}

"$phos" run -d --pid-ns -- "$counter" 8 >"$work/pid" 2>"$work/run.err"
pid=$(started "$work/pid" 30)
wait_line "$store/run/$pid.out" '^count 5' 30
cat "$mnt/events" >"$work/events" 2>/dev/null &
ev=$!
(while :; do cat "$mnt/metrics" "$mnt/status.json" >/dev/null 2>&1; sleep 0.2; done) &
poll=$!
echo "schedule every=1s keep=3 cow" >"$mnt/$pid/ctl"
mkdir -p "$work/copies"
(
	k=0
	while :; do
		for img in $(ls "$mnt/$pid/checkpoints" 2>/dev/null | grep -E '^[0-9]+$'); do
			k=$((k + 1))
			dest=$work/copies/$k
			if cp -r "$mnt/$pid/checkpoints/$img" "$dest" 2>"$work/copies/$k.err"; then
				"$image_tool" verify "$dest" >/dev/null 2>&1 && echo ok >>"$work/copies/results" ||
					echo "bad $img" >>"$work/copies/results"
			elif grep -q "$mnt/$pid/checkpoints/$img/" "$work/copies/$k.err"; then
				echo "halfway $img: $(head -1 "$work/copies/$k.err")" >>"$work/copies/results"
			else
				echo gone >>"$work/copies/results" # pruned before the copy began
			fi
			rm -rf "$dest" "$work/copies/$k.err"
		done
		sleep 0.1
	done
) &
copier=$!

fs_fds() { ls "/proc/$rig_fs/fd" | wc -l; }
fs_rss() { awk '/^VmRSS/ {print $2}' "/proc/$rig_fs/status"; }
done_n=0
for i in $(seq "$n"); do
	# (one the schedule took meanwhile makes it busy: as a person would,
	# it asks again)
	for try in $(seq 100); do
		"$phos" checkpoint "$pid" cow --wait >"$work/ck" 2>&1 && { done_n=$((done_n + 1)); break; }
		if ! grep -qi busy "$work/ck" || [ "$try" = 100 ]; then
			cat "$work/ck" >>"$work/failed"
			break
		fi
		sleep 0.1
	done
	# after a warm-up: what phosfs holds once it has done it all once
	if [ "$i" = 10 ]; then fds0=$(fs_fds) rss0=$(fs_rss); fi
done
fds1=$(fs_fds) rss1=$(fs_rss)
kill "$copier" "$poll" "$ev" 2>/dev/null
wait "$copier" "$poll" "$ev" 2>/dev/null
# Once the copies have been gone for longer than a read holds an image
# (5 s), the schedule's next prune keeps the newest 3 (and latest).
sleep 7
echo "schedule off" >"$mnt/$pid/ctl"
# (a scheduled checkpoint may have been under way: a hand-made one then
# waits or is refused busy)
# (simcuda's checkpoint control answered "OS call failed" once in 50
# under ASan, on a loaded machine: a few such failures are said, and the
# job must run on through them)
c0=$(last_count "$store/run/$pid.out")
sleep 1
check "[ $done_n -ge $((n - n / 25)) ] && [ \"\$(last_count '$store/run/$pid.out')\" -gt $c0 ]" \
	"$done_n of $n cow checkpoints, beside the schedule's, are published, and the job runs on ($(head -2 "$work/failed" 2>/dev/null | tr '\n' ' '))"
copied=$(grep -c '^ok' "$work/copies/results" 2>/dev/null)
check "[ \"\${copied:-0}\" -gt 0 ] && ! grep -qE '^(halfway|bad)' '$work/copies/results'" \
	"${copied:-0} copies made and verified, none failed halfway or was bad ($(grep -E '^(halfway|bad)' "$work/copies/results" | head -2 | tr '\n' ' '); $(grep -c '^gone' "$work/copies/results") pruned before they began)"
imgs=$(ls "$store/$pid" | grep -cE '^[0-9]+$')
check "[ $imgs -le 4 ]" "the prune still works: the store holds $imgs numbered images once the copies end"
check "[ $fds1 -le $((fds0 + 4)) ] && [ $rss1 -le $((rss0 + 16384)) ]" \
	"phosfs's descriptors ($fds0 -> $fds1) and resident memory ($rss0 -> $rss1 KiB) do not grow"
done_testing
