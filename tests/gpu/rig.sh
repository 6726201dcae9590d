# SPDX-License-Identifier: GPL-2.0-only
# shellcheck shell=bash
# What the GPU tests share: a phosfs mount of their own, and the helpers
# that drive jobs through it. Sourced (not run) by tests/gpu/*.sh, after
# they set b to the bundle; the bundle carries it as share/gpu-rig.sh.
#
#   rig_mount NAME [PHOSFS-OPTION...]
#       mounts phosfs on a fresh folder in /dev/shm and sets work, mnt,
#       store, phos and the PHOS_* variables the CLI reads; on exit, kills
#       the jobs whose pids are in $work/pids (each with its pid namespace,
#       or its session), stops phosfs, shows the end of its log (kept as
#       $PHOS_KEEP_LOGS/NAME-phosfs.log when that is set) and removes the
#       folder. Returns 1 when phosfs did not mount. With PHOS_KEEP_LOGS,
#       the jobs' stderr (the tracers' messages) and CRIU's logs are kept
#       there too.
#   start FILE CMD...    runs CMD under `phos run $PHOS_RUN_FLAGS` (with
#                        --pid-ns: pid 2 of a pid namespace of its own,
#                        under phos-init); prints its host pid
#                        (also in FILE), and notes it in $work/pids. Its
#                        output is $store/run/PID.out (and .err), and stays
#                        so for the processes restored from its images.
#   follow PID           after a restore, which gives the job a new host
#                        pid and prints it: notes PID in $work/pids, and is
#                        0 when it is a live process (the old pid is no
#                        longer the job's)
#   gone PID             0 once PID is gone (10 s at most)
#   kill_job PID         kills a job: its whole pid namespace, through its
#                        init (the job is no session leader), or its session
#                        when it has no namespace; and waits for it
#   stall PID            the stall of PID's last checkpoint, in ms
#   settled              0 once the last restore is over (a lazy one fills
#                        after its process runs: the next checkpoint waits);
#                        prints its status lines, with '# restore: '
#   now                  seconds since the epoch, with nanoseconds
#   ddp_missing          prints what this machine lacks for a two-rank
#                        DDP job (root and FUSE, two GPUs, PyTorch), or
#                        nothing
#   ddp_rig NAME         for a test of a multi-rank job: skips (the
#                        test's skip) for what ddp_missing says, keeps
#                        NVLink multicast off, runs jobs in pid namespaces
#                        of their own (an init reaps what an agent leaves;
#                        a restore needs none of this machine's pids) and
#                        mounts phosfs as NAME with phos's CRIU plugins
#                        (the test's fail_all when it does not mount)
#   reference CMD...     runs CMD untraced (PHOS_TRACE=0) to its end (15
#                        minutes at most) and keeps its train_lines in
#                        $work/ref; 1 when it did not finish (it says why)
#   same_as_reference N FILE
#                        TAP line N: whether FILE's train_lines equal
#                        $work/ref (the first differences follow)
#   train_lines FILE     the "step" and "params" lines a training example
#                        printed, each once, in step order: a step run
#                        again after a restore must print the same line,
#                        or both show
#   image_members DIR    the pids of the members of the image at DIR
#   ended PID...         waits (60 s at most) until each PID has ended: a
#                        process with GPU memory may take seconds; says
#                        how long it took, or which still run
#   time_waits           prints how many TCP sockets of this machine are in
#                        TIME_WAIT (a job killed here leaves its closed
#                        connections so; the restore ends those it needs)
# and tests/procs.bash's alive, wait_gone, job_init and wait_line (whose
# PATTERN is an extended regular expression).

# Beside this file: in the bundle, share/procs.bash; in the source tree,
# tests/procs.bash.
for rig_procs in "$(dirname "${BASH_SOURCE[0]}")"/{.,..}/procs.bash ""; do
	[ -n "$rig_procs" ] || { echo "Bail out! no procs.bash beside ${BASH_SOURCE[0]}"; exit 1; }
	# shellcheck source=tests/procs.bash
	[ -r "$rig_procs" ] && . "$rig_procs" && break
done

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
	local p init
	for p in $(cat "$work/pids" 2>/dev/null); do
		# A job's init takes its whole namespace with it.
		if init=$(job_init "$p"); then
			kill -9 "$init" 2>/dev/null
		else
			pkill -9 -s "$p" 2>/dev/null
		fi
		kill -9 "$p" 2>/dev/null
	done
	kill "$rig_fs" 2>/dev/null
	wait "$rig_fs" 2>/dev/null
	sed 's/^/# phosfs: /' "$work/phosfs.log" | tail -20
	if [ -d "${PHOS_KEEP_LOGS:-}" ]; then
		cp "$work/phosfs.log" "$PHOS_KEEP_LOGS/$rig_name-phosfs.log"
		for p in "$store"/run/*.err "$store"/.logs/*.log "$store"/*/.logs/*.log; do
			[ -s "$p" ] && cp "$p" "$PHOS_KEEP_LOGS/$rig_name-${p##*/}"
		done
	fi
	rm -rf "$work"
}

start() {
	local f=$1
	shift
	# shellcheck disable=SC2086 # flags, split on purpose
	"$phos" run ${PHOS_RUN_FLAGS:-} -- "$@" >"$f" 2>/dev/null &
	for _ in $(seq 50); do [ -s "$f" ] && break; sleep 0.1; done
	cat "$f" >>"$work/pids"
	cat "$f"
}

follow() {
	case ${1:-x} in *[!0-9]*) return 1 ;; esac
	echo "$1" >>"$work/pids"
	alive "$1"
}

gone() { wait_gone "$1" 10; }

kill_job() {
	local init
	case ${1:-x} in *[!0-9]*) return 1 ;; esac
	if init=$(job_init "$1"); then
		# pid 1 of the namespace: when it dies, the kernel kills the rest.
		kill -9 "$init"
		kill -9 "$1" 2>/dev/null
		for _ in $(seq 100); do alive "$init" || alive "$1" || return 0; sleep 0.1; done
		return 1
	fi
	pkill -9 -s "$1"
	kill -9 "$1" 2>/dev/null
	for _ in $(seq 100); do pgrep -s "$1" >/dev/null || alive "$1" || return 0; sleep 0.1; done
	return 1
}

stall() { awk -F': ' '/^stall ms/ {print $2}' "$mnt/$1/status"; }

now() { date +%s.%N; }

settled() {
	for _ in $(seq 600); do grep -q '^job: none' "$mnt/status" && break; sleep 0.05; done
	grep -E '^(restore|resumed ms|fully restored ms|on-demand waits|safety-net waits|filled on demand|error)' "$mnt/status" |
		tr '\n' ';' | sed 's/^/# restore: /'
	echo
	grep -q '^job: none' "$mnt/status"
}

ddp_missing() {
	local ngpu
	if [ "$(id -u)" != 0 ] || [ ! -e /dev/fuse ]; then
		echo "needs root and FUSE"
		return
	fi
	ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
	[ "$ngpu" -ge 2 ] || { echo "needs two GPUs (this machine has ${ngpu:-0})"; return; }
	python3 -c 'import torch.distributed' 2>/dev/null || echo "needs PyTorch"
}

train_lines() {
	grep '^step' "$1" | sort -s -n -k2,2 | uniq
	grep '^params' "$1" | uniq
}

time_waits() {
	# /proc/net/tcp{,6}: the fourth field is the state, 06 TIME_WAIT
	# (ss(8) is not on every machine).
	echo "# $(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$4 == "06"' | wc -l) TCP sockets in TIME_WAIT at the restore"
}

image_members() { "$b/bin/phos-image" info "$1" 2>/dev/null | awk '/^member / {sub(":", "", $2); print $2}'; }

ended() {
	local r t0
	t0=$(now)
	for _ in $(seq 120); do
		for r in "$@"; do alive "$r" && break; done
		if [ $# = 0 ] || ! alive "$r"; then
			echo "# ended in $(awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}') s: $*"
			return 0
		fi
		sleep 0.5
	done
	echo "# still running 60 s on:$(for r in "$@"; do alive "$r" && echo " $r"; done)"
	return 1
}

reference() {
	local ref
	ref=$(PHOS_TRACE=0 start "$work/pid0" "$@")
	if ! wait_line "$store/run/$ref.out" "^params" 900; then
		echo "# reference run: $(tail -5 "$store/run/$ref.out" "$store/run/$ref.err" 2>/dev/null | tr '\n' ' ')"
		return 1
	fi
	train_lines "$store/run/$ref.out" >"$work/ref"
}

same_as_reference() {
	train_lines "$2" >"$work/got"
	if cmp -s "$work/ref" "$work/got"; then
		echo "ok $1 - its $(grep -c '^step' "$work/got") losses and parameter checksum equal the uninterrupted run's"
	else
		echo "not ok $1 - its losses differ from the uninterrupted run's"
		diff "$work/ref" "$work/got" | head -5 | sed 's/^/# /'
	fi
}

ddp_rig() {
	local why
	why=$(ddp_missing)
	[ -z "$why" ] || skip "$why"
	export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
	export PHOS_RUN_FLAGS=--pid-ns
	rig_mount "$1" --criu-plugins "$b/criu-plugins" || fail_all "phosfs did not mount (bundle $b)"
}
