# SPDX-License-Identifier: GPL-2.0-only
# shellcheck shell=bash
# "Machines" on one host, for the tests of phos send and phos receive:
# each a phosfs in a mount namespace of its own, whose $work/run is a
# tmpfs of its own, so that each has its socket at the same path
# ($PHOS_SOCKET, $work/run/sock), as /run/phos is on two machines.
# Sourced (not run; it is no test) by tests/phos_send_*.sh and
# tests/gpu/phos_send_*_on_gpu.sh (the GPU bundle carries it as
# share/nodes.bash), after procs.bash, with $work set.
#
#   node NAME PHOSFS CRIU [OPTION]...
#                 starts PHOSFS (with OPTIONs) as node NAME: mount
#                 $work/NAME/mnt, store $work/NAME/store, log
#                 $work/NAME.log, its pid in $work/NAME.pid; 1 when it
#                 did not mount within 10 s
#   on NAME CMD...
#                 runs CMD in NAME's mount namespace, with PHOS_MOUNT its
#                 mount
#   nodes_end     kills the jobs noted in $work/pids (each with its pid
#                 namespace's init), then every node's phosfs

node() {
	local name=$1 phosfs=$2 criu=$3
	shift 3
	mkdir -p "$work/run" "$work/$name/mnt"
	unshare -m --propagation private bash -c 'mount -t tmpfs none "$1" && shift && exec "$@"' _ "$work/run" \
		"$phosfs" --socket "$PHOS_SOCKET" --store "$work/$name/store" --criu "$criu" "$@" -f "$work/$name/mnt" \
		</dev/null >/dev/null 2>"$work/$name.log" &
	echo $! >"$work/$name.pid"
	for _ in $(seq 200); do
		nsenter -t "$(cat "$work/$name.pid")" -m test -e "$work/$name/mnt/version" && return 0
		sleep 0.05
	done
	return 1
}

on() {
	local n=$1
	shift
	nsenter -t "$(cat "$work/$n.pid")" -m -- env PHOS_MOUNT="$work/$n/mnt" "$@"
}

nodes_end() {
	local p init f
	for p in $(cat "$work/pids" 2>/dev/null); do
		init=$(job_init "$p") && kill -9 "$init" 2>/dev/null
		kill -9 "$p" 2>/dev/null
	done
	for f in "$work"/*.pid; do
		[ -e "$f" ] && kill "$(cat "$f")" 2>/dev/null
	done
	wait 2>/dev/null
}
