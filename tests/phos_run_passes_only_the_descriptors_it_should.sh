#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# phos run passes the job stdin, stdout and stderr, and no other
# descriptor it inherited (CRIU could not dump one of a mount outside the
# job's namespace, and they are no business of the job's), but those of
# systemd's socket activation ($LISTEN_FDS), with LISTEN_PID the job's:
#   1. with fd 7 open in phos run, the job (with and without --pid-ns) has
#      0, 1 and 2 only;
#   2. with LISTEN_FDS=1 and fd 3 open, the job has 3 too, and LISTEN_PID
#      is its own pid.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/phos_run_rig.bash
. "${PHOS_SRCDIR:-$here/../..}/tests/phos_run_rig.bash"
rig_require
rig_mount

# fds MODE FILE: starts, under phos run with MODE, a job that writes its
# descriptors (and LISTEN_PID, and its pid) into FILE.
fds() {
	# (ls of the shell's: the shell itself opens nothing to list them)
	"$phos" run -d "$1" -- sh -c 'echo fds; ls /proc/$$/fd; echo "listen_pid ${LISTEN_PID:-}"; echo "pid $$"' \
		>"$work/pid" 2>"$work/run.err"
	local pid
	pid=$(started "$work/pid" 30)
	wait_line "$store/run/$pid.out" '^pid' 20
	# "fds 0 1 2", and the rest as they are
	awk '/^fds$/ {f = 1; printf "fds"; next} /^listen_pid/ {if (f) print ""; f = 0} f {printf " %s", $1; next} {print}' \
		"$store/run/$pid.out" >"$2"
}
for mode in --pid-ns --host-pids; do
	exec 7>"$work/seven"
	fds "$mode" "$work/fds$mode"
	exec 7>&-
	check "grep -qx 'fds 0 1 2' '$work/fds$mode'" \
		"phos run $mode: the job has 0, 1 and 2, not the fd 7 phos run had ($(head -1 "$work/fds$mode"))"
done
exec 3<"$work/seven"
LISTEN_FDS=1 fds --pid-ns "$work/listen"
exec 3<&-
check "grep -qx 'fds 0 1 2 3' '$work/listen' && [ \"\$(awk '/^listen_pid/ {print \$2}' '$work/listen')\" = \"\$(awk '/^pid/ {print \$2}' '$work/listen')\" ]" \
	"with LISTEN_FDS=1, the job has fd 3 too, and LISTEN_PID is its pid ($(tr '\n' ' ' <"$work/listen"))"
done_testing
