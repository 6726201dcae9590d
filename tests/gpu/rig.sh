# shellcheck shell=bash
# What the GPU tests share: a phosfs mount of their own, and the helpers
# that drive jobs through it. Sourced (not run) by tests/gpu/*.sh, after
# they set b to the bundle; the bundle carries it as share/gpu-rig.sh.
#
#   rig_mount NAME [PHOSFS-OPTION...]
#       mounts phosfs on a fresh folder in /dev/shm and sets work, mnt,
#       store, phos and the PHOS_* variables the CLI reads; on exit, kills
#       the jobs whose pids are in $work/pids (each a session), stops
#       phosfs, shows the end of its log (kept as $PHOS_KEEP_LOGS/NAME-
#       phosfs.log when that is set) and removes the folder. Returns 1 when
#       phosfs did not mount.
#   start FILE CMD...    runs CMD under `phos run`; prints its pid (also in
#                        FILE), and notes it in $work/pids
#   wait_line FILE PATTERN SECONDS
#                        0 once a line of FILE matches PATTERN
#   gone PID             0 once PID is gone (10 s at most)
#   kill_job SID         kills a job's whole session, and waits for it
#   stall PID            the stall of PID's last checkpoint, in ms
#   now                  seconds since the epoch, with nanoseconds

rig_mount() {
	local name=$1
	shift
	rig_name=$name
	work=$(mktemp -d "/dev/shm/phos-$name.XXXXXX")
	mnt=$work/mnt store=$work/store
	mkdir -p "$mnt"
	export PHOS_MOUNT=$mnt PHOS_SOCKET=$work/sock PHOS_LIBPHOS=$b/lib/libphos.so
	"$b/bin/phosfs" --socket "$PHOS_SOCKET" --store "$store" --criu "$b/bin/criu" "$@" -f "$mnt" \
		2>"$work/phosfs.log" &
	rig_fs=$!
	trap rig_cleanup EXIT
	phos="$b/bin/phos"
	for _ in $(seq 50); do [ -e "$mnt/version" ] && return 0; sleep 0.1; done
	return 1
}

rig_cleanup() {
	local p
	for p in $(cat "$work/pids" 2>/dev/null); do
		pkill -9 -s "$p" 2>/dev/null
		kill -9 "$p" 2>/dev/null
	done
	kill "$rig_fs" 2>/dev/null
	wait "$rig_fs" 2>/dev/null
	sed 's/^/# phosfs: /' "$work/phosfs.log" | tail -20
	[ -d "${PHOS_KEEP_LOGS:-}" ] && cp "$work/phosfs.log" "$PHOS_KEEP_LOGS/$rig_name-phosfs.log"
	rm -rf "$work"
}

start() {
	local f=$1
	shift
	"$phos" run -- "$@" >"$f" 2>/dev/null &
	for _ in $(seq 50); do [ -s "$f" ] && break; sleep 0.1; done
	cat "$f" >>"$work/pids"
	cat "$f"
}

wait_line() {
	for _ in $(seq $(($3 * 10))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
	return 1
}

gone() {
	for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
	return 1
}

kill_job() {
	pkill -9 -s "$1"
	for _ in $(seq 100); do pgrep -s "$1" >/dev/null || return 0; sleep 0.1; done
	return 1
}

stall() { awk -F': ' '/^stall ms/ {print $2}' "$mnt/$1/status"; }

now() { date +%s.%N; }
