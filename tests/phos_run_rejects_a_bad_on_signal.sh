#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# phos run refuses a bad --on-signal (and its other bad options) with a
# clear error and exit status 2, before anything starts: no job runs, and
# phosfs is not even looked for. A good one gets past the options (to
# "phosfs is not mounted" here, exit 1).
set -u
here=$(cd "$(dirname "$0")" && pwd)
phos=${PHOS_CLI:-$here/../phos}
[ -x "$phos" ] || { echo "1..0 # SKIP phos not built"; exit 0; }
work=$(mktemp -d /tmp/phos-bad-signal.XXXXXX)
trap 'rm -rf "$work"' EXIT
export PHOS_MOUNT=$work/no-mount
unset SLURM_JOB_ID
n=0
failed=0

# refused WHY ARGS...: phos run ARGS -- touch STARTED exits 2, says WHY
# (a pattern of grep -E), and starts nothing.
refused() {
	local why=$1
	shift
	n=$((n + 1))
	"$phos" run "$@" -- touch "$work/started" 2>"$work/err"
	local rc=$?
	if [ "$rc" = 2 ] && grep -Eq -e "$why" "$work/err" && [ ! -e "$work/started" ]; then
		echo "ok $n - $* is refused: $(head -1 "$work/err")"
	else
		echo "not ok $n - $* is refused with exit 2 (got $rc) and '$why'"
		sed 's/^/# /' "$work/err"
		failed=1
	fi
}

refused "unknown signal 'FOO'" --on-signal FOO=checkpoint
refused "unknown signal 'SIGNOPE'" --on-signal SIGNOPE=checkpoint
refused "unknown signal '99'" --on-signal 99=checkpoint
refused "unknown action 'snapshot'" --on-signal TERM=snapshot
refused "unknown action 'kill'" --on-signal TERM=kill
refused "expected SIG=ACTION" --on-signal TERM
refused "SIGKILL cannot be caught" --on-signal KILL=checkpoint
refused "SIGSTOP cannot be caught" --on-signal SIGSTOP=stop
refused "SIGCHLD tells phos run that its job ended" --on-signal CHLD=checkpoint
refused "unknown 'pass' after the action" --on-signal USR1=cow,pass
refused "ends the job passes nothing on" --on-signal USR1=stop-kill,nopass
refused "SIGTERM has an action already" --on-signal TERM=cow --on-signal sigterm=stop
refused "needs phos run to wait for its job: not with -d" -d --on-signal TERM=checkpoint
refused "--on-signal-timeout '0'" --on-signal TERM=checkpoint --on-signal-timeout 0
refused "--restore-from latest needs the job's name" --restore-from latest
refused "--name 'a/b'" --name a/b
refused "--keep 'x'" --keep x

# Good ones get past the options.
for good in "TERM=checkpoint" "SIGUSR1=recopy-kill" "usr2=cow,nopass" "10=stop"; do
	n=$((n + 1))
	"$phos" run --on-signal "$good" --on-signal HUP=checkpoint-kill -- touch "$work/started" 2>"$work/err"
	rc=$?
	if [ "$rc" = 1 ] && grep -q "phosfs is not mounted" "$work/err" && [ ! -e "$work/started" ]; then
		echo "ok $n - --on-signal $good is taken (then: phosfs is not mounted)"
	else
		echo "not ok $n - --on-signal $good is taken (got $rc)"
		sed 's/^/# /' "$work/err"
		failed=1
	fi
done
echo "1..$n"
exit "$failed"
