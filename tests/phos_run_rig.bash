# shellcheck shell=bash
# What the shell tests of `phos run` share: a real phosfs on a temporary
# mount, with simcuda as the driver. Sourced (not run; it is no test) by
# tests/phos_run_*.sh and tests/slurm_*.sh, after `set -u`.
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
#   wait_line FILE PATTERN SECONDS
#                        0 once a line of FILE matches PATTERN (grep -E)
#   last_count FILE      the counter's last "count N", or 0
#   alive PID            0 when PID is a live process (not a zombie)
#   job_init PID         prints the phos-init of PID's namespace
#   wait_gone PID SECONDS

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
	export LD_LIBRARY_PATH=${PHOS_SIMCUDA:-$(dirname "$phos")/simcuda}
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
	for _ in $(seq $(($3 * 20))); do grep -Eq "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
	return 1
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
	fi
	if [ -n "${PHOS_TEST_KEEP:-}" ]; then
		echo "# kept $work" >&2
	else
		rm -rf "$work"
	fi
}
