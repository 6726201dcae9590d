# SPDX-License-Identifier: GPL-2.0-only
# shellcheck shell=bash
# What the shell tests of `phos run` share: a real phosfs on a temporary
# mount, with simcuda as the driver; in a GPU bundle (PHOS_BUNDLE set, as
# its run-checks does), the bundle's programs on the real driver. Sourced
# (not run; it is no test) by tests/phos_run_*.sh and tests/slurm_*.sh,
# after `set -u`.
#
#   rig_require          skips the test (TAP's 1..0 # SKIP) unless root,
#                        FUSE, CRIU and the built programs are here; sets
#                        phos, counter, src
#   rig_mount            mounts phosfs on a fresh folder; sets work, mnt,
#                        store and the PHOS_* variables phos reads; on
#                        exit, kills the jobs noted in $work/pids (each
#                        with its pid namespace), stops phosfs, shows the
#                        end of its log when a test failed, removes work
#   tap ok|"not ok" TEXT one TAP line; check COND TEXT: ok when COND holds
#   done_testing         the plan, and the exit status
#   note PID             notes a job's pid, for the clean-up
#   started FILE [SECONDS]
#                        waits (10 s) for the pid phos run prints first,
#                        into FILE; prints it and notes it
#   last_count FILE      the counter's last "count N", or 0
# and tests/procs.bash's alive, wait_gone, job_init and wait_line.

# shellcheck source=tests/procs.bash
. "$(dirname "${BASH_SOURCE[0]}")/procs.bash"

rig_n=0
rig_failed=0

tap() {
	rig_n=$((rig_n + 1))
	echo "$1 $rig_n - $2"
	[ "$1" = ok ] || rig_failed=1
}

check() {
	if eval "$1"; then tap ok "$2"; else tap "not ok" "$2"; fi
}

done_testing() {
	echo "1..$rig_n"
	exit "$rig_failed"
}

rig_skip() {
	echo "1..0 # SKIP $*"
	exit 0
}

rig_require() {
	[ "$(id -u)" = 0 ] || rig_skip "needs root (FUSE and CRIU)"
	[ -r /dev/fuse ] && [ -w /dev/fuse ] || rig_skip "no /dev/fuse"
	local here
	here=$(cd "$(dirname "$0")" && pwd)
	src=${PHOS_SRCDIR:-$here/../..}
	# In a GPU bundle (make gpu-bundle; its run-checks sets PHOS_BUNDLE):
	# its programs, on the real driver.
	unset rig_driver
	if [ -n "${PHOS_BUNDLE:-}" ]; then
		: "${PHOS_CLI:=$PHOS_BUNDLE/bin/phos}" "${PHOS_PHOSFS:=$PHOS_BUNDLE/bin/phosfs}"
		: "${PHOS_COUNTER:=$PHOS_BUNDLE/examples/counter}" "${PHOS_LIBPHOS:=$PHOS_BUNDLE/lib/libphos.so}"
		: "${PHOS_CRIU_PLUGINS:=$PHOS_BUNDLE/criu-plugins}"
		rig_driver=${LD_LIBRARY_PATH:-}
		src=${PHOS_SRCDIR:-$PHOS_BUNDLE/..}
	fi
	phos=${PHOS_CLI:-$here/../phos}
	counter=${PHOS_COUNTER:-$here/../examples/counter}
	rig_phosfs=${PHOS_PHOSFS:-$here/../phosfs/phosfs}
	rig_criu=${PHOS_CRIU:-$src/deps/criu/sbin/criu}
	[ -x "$rig_criu" ] || rig_skip "no CRIU (make deps)"
	[ -x "$phos" ] && [ -x "$counter" ] && [ -x "$rig_phosfs" ] || rig_skip "phos, phosfs or examples/counter not built"
}

rig_mount() {
	work=$(mktemp -d /tmp/phos-run-test.XXXXXX)
	mnt=$work/mnt store=$work/store
	mkdir -p "$mnt"
	: >"$work/pids"
	export PHOS_MOUNT=$mnt PHOS_SOCKET=$work/sock
	export PHOS_LIBPHOS=${PHOS_LIBPHOS:-$(dirname "$phos")/libphos.so}
	export LD_LIBRARY_PATH=${rig_driver-${PHOS_SIMCUDA:-$(dirname "$phos")/simcuda}}
	# ASan builds: the tracer is preloaded ahead of the runtime.
	export ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0
	local plugins=()
	[ -n "${PHOS_CRIU_PLUGINS:-}" ] && plugins=(--criu-plugins "$PHOS_CRIU_PLUGINS")
	"$rig_phosfs" --socket "$PHOS_SOCKET" --store "$store" --criu "$rig_criu" "${plugins[@]}" -f "$mnt" \
		2>"$work/phosfs.log" &
	rig_fs=$!
	trap rig_cleanup EXIT
	for _ in $(seq 100); do [ -e "$mnt/version" ] && return 0; sleep 0.05; done
	echo "Bail out! phosfs did not mount (its log follows)"
	sed 's/^/# /' "$work/phosfs.log"
	exit 1
}

note() { echo "$1" >>"$work/pids"; }

started() {
	wait_line "$1" '^[0-9]+$' "${2:-10}" || return 1
	head -1 "$1"
	note "$(head -1 "$1")"
}

last_count() {
	local n
	n=$(grep -E '^count [0-9]+$' "$1" 2>/dev/null | tail -1 | cut -d' ' -f2)
	echo "${n:-0}"
}

rig_cleanup() {
	local p init
	for p in $(cat "$work/pids" 2>/dev/null); do
		# A job's init takes its whole namespace with it.
		init=$(job_init "$p") && kill -9 "$init" 2>/dev/null
		kill -9 "$p" 2>/dev/null
	done
	kill "$rig_fs" 2>/dev/null
	wait "$rig_fs" 2>/dev/null
	if [ "$rig_failed" != 0 ]; then
		tail -n 30 "$work/phosfs.log" | sed 's/^/# phosfs: /' >&2
		# What each phos run said (its stderr, as the tests keep it).
		local err
		for err in "$work"/*.err; do
			[ -s "$err" ] && tail -n 15 "$err" | sed "s|^|# $(basename "$err"): |" >&2
		done
	fi
	if [ -n "${PHOS_TEST_KEEP:-}" ]; then
		echo "# kept $work" >&2
	else
		rm -rf "$work"
	fi
}
