#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# phosfs ends on SIGTERM at once, whichever of its threads the kernel gives
# the signal to. Right after SIGCONT the main thread may not take it yet,
# and the kernel gave it to one of phosfs's own threads (the registry's,
# waiting in poll): libfuse's handler marked the session exited, but no
# thread of the FUSE loop woke, and phosfs ran on until its mount's next
# request (as after a test that stops a FUSE daemon and lets it go).
# phosfs_thread blocks the signal in its own threads.
#
# 20 times: phosfs mounted, then SIGSTOP, SIGCONT and SIGTERM at once;
# each must end within 3 s with nothing asked of its mount.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/phos_run_rig.bash
. "${PHOS_SRCDIR:-$here/../..}/tests/phos_run_rig.bash"
rig_require
work=$(mktemp -d /tmp/phos-sigterm-test.XXXXXX)
mkdir -p "$work/mnt"
trap 'umount -l "$work/mnt" 2>/dev/null; rm -rf "$work"' EXIT
export LD_LIBRARY_PATH=${rig_driver-${PHOS_SIMCUDA:-$(dirname "$phos")/simcuda}}
export ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0
n=${PHOS_SIGTERM_TRIES:-20} hung=0 mounted=0
for _ in $(seq "$n"); do
	"$rig_phosfs" --socket "$work/sock" --store "$work/store" --criu "$rig_criu" -f "$work/mnt" 2>>"$work/log" &
	p=$!
	for _ in $(seq 200); do [ -e "$work/mnt/version" ] && mounted=$((mounted + 1)) && break; sleep 0.02; done
	kill -STOP "$p"
	kill -CONT "$p"
	kill -TERM "$p"
	if ! wait_gone "$p" 3; then
		hung=$((hung + 1))
		stat "$work/mnt/version" >/dev/null 2>&1 # a request wakes it
		wait_gone "$p" 3 || kill -9 "$p"
	fi
	wait "$p" 2>/dev/null
	umount -l "$work/mnt" 2>/dev/null
done
check '[ "$mounted" = "$n" ]' "phosfs mounted $mounted times of $n"
check '[ "$hung" = 0 ]' "SIGTERM right after SIGCONT ended it within 3 s each time ($hung of $n waited for a request)"
done_testing
