#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Clones beside a running original, on a real GPU, with a real phosfs
# mount. A job of `phos run` lives in a pid namespace of its own (pid 2,
# under phos-init), so its image restores while the original still runs,
# as often as wanted: each clone is pid 2 of a new namespace, under a new
# host pid (the one `phos restore` prints), and writes on to the original's
# output file.
#   1. tests/apps/cow_app (PHOS_CLONES_MIB MiB of device memory, default
#      2048) is checkpointed with cow while it runs, and the image restored
#      twice, `lazy` and then `eager`, while the original runs on: two live
#      clones, each pid 2 in its namespace, and the original still running.
#      Prints each restore's times: phos restore's wall time, and resumed
#      ms and fully restored ms from status once the restore is over;
#   2. the original and both clones are asked (SIGUSR1), one at a time
#      since they write to the same file, to check every byte of their
#      device memory against their host copies, then again after running
#      on for 2 s: each answer is a new "verify ok" line, and none failed;
#   3. PyTorch training (examples/pytorch/train_mlp.py) is checkpointed
#      with cow while it runs and restored twice beside the running
#      original (lazy, eager), from the mount (/phos/PID/checkpoints/clone,
#      a path the job's own mount namespace lacks); once the three have
#      run to their last step,
#      every step line of the output file (its loss, exactly) is the
#      uninterrupted run's, each step before the checkpoint is there once
#      and each step after it three times (the original and each clone).
# Needs root, FUSE, a GPU (and PyTorch with CUDA for 3). PHOS_CLONES_STEPS
# sets the steps of 3 (default 600); PHOS_KEEP_LOGS=DIR keeps phosfs's log
# there.
b=${PHOS_BUNDLE:-gpu-bundle}
src=${PHOS_SRCDIR:-$b/..}
mib=${PHOS_CLONES_MIB:-2048}
steps=${PHOS_CLONES_STEPS:-600}
echo "1..3"
# The clones need a pid namespace of their own (phos run --pid-ns), where
# the job also has a mount namespace with a /proc of its pid namespace:
# the CUDA driver opens /proc/<getpid()>/... .
export PHOS_RUN_FLAGS=--pid-ns
skip() { for i in 1 2 3; do echo "ok $i # skip $1"; done; exit 0; }
[ "$(id -u)" = 0 ] && [ -e /dev/fuse ] || skip "needs root and FUSE"
nvidia-smi -L >/dev/null 2>&1 || skip "no GPU"
. "$b/share/gpu-rig.sh"
rig_mount clones --criu-plugins "$b/criu-plugins" ||
	{ for i in 1 2 3; do echo "not ok $i - phosfs did not mount (bundle $b)"; done; exit 1; }
# Sends SIGUSR1 to PID and waits for one more "verify ok" line in OUT.
verify() { # PID OUT
	local n
	n=$(grep -c '^verify ok' "$2")
	alive "$1" || return 1
	kill -USR1 "$1" || return 1
	for _ in $(seq 1200); do
		grep -q '^verify FAILED' "$2" && return 1
		[ "$(grep -c '^verify ok' "$2")" -gt "$n" ] && return 0
		sleep 0.05
	done
	return 1
}
ns_pid() { awk '/^NSpid:/ {print $NF}' "/proc/$1/status" 2>/dev/null; }
# Takes a cow checkpoint named clone of PID while it runs; 0 when it is
# done (the image is $store/PID/clone).
checkpoint() { # PID
	"$phos" checkpoint "$1" cow --name clone --wait 2>&1 | sed 's/^/# checkpoint: /'
	grep -q '^last job: checkpoint cow name=clone: done' "$mnt/$1/status"
}
# Restores the image DIR in MODE beside what runs; sets cpid to the pid the
# restore printed (noted for the clean-up), waits for the restore to be
# over (a lazy one fills after its clone runs) and prints its times. 0 when
# the clone runs as pid 2 of a namespace of its own and the restore is done.
clone() { # DIR MODE
	local t0 t1
	t0=$(now)
	cpid=$("$phos" restore "$1" "$2" 2>>"$work/restore.err")
	t1=$(now)
	echo "# $2: phos restore $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}') s; clone $cpid, pid $(ns_pid "$cpid") in its namespace"
	follow "$cpid" && [ "$(ns_pid "$cpid")" = 2 ] || return 1
	settled && grep -q "^last job: restore .* $2: done" "$mnt/status"
}

# 1. cow_app, cloned twice while it runs.
pid=$(start "$work/pid1" "$b/apps/cow_app" "$b/apps/cow.cubin" "$mib" "$RANDOM")
out=$store/run/$pid.out
clones=()
if wait_line "$out" "^ops 200" 120 && checkpoint "$pid"; then
	grep -E '^(stall ms|steps ms|off gpu at|published at|cow |safety)' "$mnt/$pid/status" | tr '\n' ';' | sed 's/^/# /'
	echo
	for mode in lazy eager; do
		if clone "$store/$pid/clone" "$mode"; then
			clones+=("$cpid")
		else
			echo "# $mode: the clone did not come back"
			kill_job "$cpid"
		fi
	done
fi
if [ ${#clones[@]} = 2 ] && alive "$pid" && [ "$(ns_pid "$pid")" = 2 ] &&
	[ "${clones[0]}" != "${clones[1]}" ] && [ "${clones[0]}" != "$pid" ] && [ "${clones[1]}" != "$pid" ]; then
	echo "ok 1 - cow_app ($mib MiB) checkpointed with cow restores twice beside its running original: clones ${clones[0]} (lazy) and ${clones[1]} (eager), original $pid"
else
	echo "not ok 1 - cow_app ($mib MiB) did not restore twice beside its running original (clones: ${clones[*]:-none})"
	sed 's/^/# /' "$work/restore.err" 2>/dev/null | tail -5
fi

# 2. Each of the three checks its memory, one at a time, twice.
good=0
if [ ${#clones[@]} = 2 ]; then
	for round in 1 2; do
		[ "$round" = 2 ] && sleep 2
		who=original
		for p in "$pid" "${clones[@]}"; do
			if verify "$p" "$out"; then
				good=$((good + 1))
				echo "# round $round, $who $p: $(grep '^verify ok' "$out" | tail -1)"
			else
				echo "# round $round, $who $p: no new 'verify ok'"
			fi
			[ "$who" = original ] && who="lazy clone" || who="eager clone"
		done
	done
fi
grep -E 'FAILED|failed' "$out" | head -3 | sed 's/^/# /'
if [ $good = 6 ] && ! grep -q '^verify FAILED' "$out"; then
	echo "ok 2 - the original and both clones each check every byte of their device memory, and again after running on: each continues exactly"
else
	echo "not ok 2 - $good of 6 checks of the original and its clones came back 'verify ok'"
fi
for p in "$pid" "${clones[@]}"; do kill_job "$p"; done
[ -n "$pid" ] && rm -rf "${store:?}/$pid"

# 3. PyTorch, cloned twice while it trains.
if ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	echo "ok 3 # skip no PyTorch with CUDA"
	exit 0
fi
plain=$(python3 "$src/examples/pytorch/train_mlp.py" --steps "$steps" 2>&1)
pid=$(start "$work/pid3" python3 "$src/examples/pytorch/train_mlp.py" --steps "$steps" --sleep 0.05)
out=$store/run/$pid.out err=$store/run/$pid.err
clones=() ok=0 taken=0
if wait_line "$out" "^step 30 " 180; then
	before=$(grep -c '^step' "$out")
	checkpoint "$pid" && taken=1
	after=$(grep -c '^step' "$out")
	for mode in lazy eager; do
		[ "$taken" = 1 ] || break
		if clone "$mnt/$pid/checkpoints/clone" "$mode"; then
			clones+=("$cpid")
		else
			echo "# $mode: the clone did not come back"
			kill_job "$cpid"
		fi
	done
	beside=0
	alive "$pid" && beside=1 # the original ran on while both were restored
	# Until all three have trained to their end.
	for _ in $(seq 3000); do
		alive "$pid" || alive "${clones[0]}" || alive "${clones[1]}" || break
		sleep 0.1
	done
	bad=$(grep '^step' "$out" | sort -u | grep -vxF -f <(printf '%s\n' "$plain") | wc -l)
	# Each step: once before the checkpoint, three times after it, the first
	# three times within the steps printed while it was taken.
	counts=$(grep '^step' "$out" | awk -v n="$steps" -v lo="$before" -v hi="$after" '
		{ c[$2]++ }
		END {
			first = -1
			for (k = 0; k < n; k++) {
				if (first < 0 && c[k] == 3)
					first = k
				if (c[k] != (first < 0 ? 1 : 3)) {
					printf "step %d is there %d times", k, c[k]
					exit 1
				}
			}
			if (first < lo || first > hi) {
				printf "the clones began at step %d, not within %d..%d", first, lo, hi
				exit 1
			}
			printf "steps %d..%d three times, each before once", first, n - 1
		}')
	counted=$?
	echo "# checkpoint at step lines $before..$after; clones ${clones[*]:-none} beside $pid; $(grep -c '^step' "$out") step lines, $bad differ from the uninterrupted run; $counts"
	[ ${#clones[@]} = 2 ] && [ "$beside" = 1 ] && [ "$bad" = 0 ] && [ "$counted" = 0 ] && ok=1
	grep -v '^step' "$out" "$err" 2>/dev/null | tail -5 | sed 's/^/# /'
else
	echo "# pytorch: no step 30 within 180 s; what it said:"
	tail -5 "$out" "$err" 2>/dev/null | sed 's/^/# /'
fi
[ $ok = 1 ] && echo "ok 3 - PyTorch cloned twice from the mount beside its running original: the three go on with the losses of an uninterrupted run" ||
	echo "not ok 3 - PyTorch cloned twice beside its running original did not go on exactly"
for p in "$pid" "${clones[@]}"; do kill_job "$p"; done
