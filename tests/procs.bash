# SPDX-License-Identifier: GPL-2.0-only
# shellcheck shell=bash
# What every shell test that drives jobs needs of processes and their
# output. Sourced (not run; it is no test) by tests/phos_run_rig.bash and
# tests/gpu/rig.sh (the GPU bundle carries it as share/procs.bash).
#
#   alive PID            0 when PID is a number and a live process (not a
#                        zombie)
#   wait_gone PID SECONDS
#                        0 once PID is gone; 1 when it is still there
#   job_init PID         prints the init of PID's pid namespace (its
#                        parent, phos-init); 1 when it has none (a job run
#                        with --host-pids, or not by phos run)
#   wait_line FILE PATTERN SECONDS
#                        0 once a line of FILE matches PATTERN (an extended
#                        regular expression, grep -E)

alive() {
	local s
	case ${1:-x} in *[!0-9]*) return 1 ;; esac
	s=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null)
	[ -n "$s" ] && [ "${s%% *}" != Z ]
}

wait_gone() {
	for _ in $(seq $(($2 * 20))); do alive "$1" || return 0; sleep 0.05; done
	return 1
}

job_init() {
	local pp
	case ${1:-x} in *[!0-9]*) return 1 ;; esac
	pp=$(awk '/^PPid:/ {print $2}' "/proc/$1/status" 2>/dev/null)
	[ -n "$pp" ] && [ "$pp" -gt 1 ] && [ "$(cat "/proc/$pp/comm" 2>/dev/null)" = phos-init ] || return 1
	echo "$pp"
}

wait_line() {
	for _ in $(seq $(($3 * 20))); do grep -Eq -e "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
	return 1
}
