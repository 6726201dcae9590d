#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The command line works for a process's owner who is not root, wherever
# `echo … > ctl` does. A process of user nobody:
#   1. nobody's `echo checkpoint stop name=e > /phos/PID/ctl` is taken;
#   2. nobody's `phos checkpoint PID stop --name c --wait` is taken too,
#      and says how the checkpoint ended, not "permission denied";
#   3. nobody's `phos status PID` shows that checkpoint;
#   4. another user (daemon) is still refused, told why.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/phos_run_rig.bash
. "${PHOS_SRCDIR:-$here/../..}/tests/phos_run_rig.bash"
rig_require
command -v setpriv >/dev/null || rig_skip "no setpriv (util-linux)"
rig_mount
chmod 755 "$work" # (others reach the mount through it)
as() { # UID CMD...: CMD as that user, with the mount's variables
	local u=$1
	shift
	setpriv --reuid="$u" --regid="$u" --clear-groups -- "$@"
}
setpriv --reuid=65534 --regid=65534 --clear-groups -- sleep 1000 </dev/null >/dev/null 2>&1 &
pid=$!
note "$pid"
for _ in $(seq 50); do [ "$(stat -c %u "/proc/$pid" 2>/dev/null)" = 65534 ] && break; sleep 0.1; done
ctl=$mnt/$pid/ctl
check "as 65534 sh -c 'echo checkpoint stop name=e > $ctl'" "the owner's echo checkpoint > ctl is taken"
for _ in $(seq 100); do grep -q '^job: none' "$mnt/$pid/status" 2>/dev/null && break; sleep 0.1; done
as 65534 "$phos" checkpoint "$pid" stop --name c --wait >"$work/ck" 2>&1
check "! grep -q 'permission denied' '$work/ck' && grep -q 'checkpoint stop name=c' '$work/ck'" \
	"the owner's phos checkpoint is taken and says how it ended ($(tail -1 "$work/ck"))"
as 65534 "$phos" status "$pid" >"$work/st" 2>&1
check "grep -q 'checkpoint stop name=c' '$work/st'" "the owner's phos status shows it"
as 1 "$phos" checkpoint "$pid" stop >"$work/other" 2>&1
check "grep -q 'only root and the owner' '$work/other'" "another user is refused, told why ($(tail -1 "$work/other"))"
kill -9 "$pid"
done_testing
