#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Readers of /events never wedge phosfs. A read of /events waits for the
# next event; it must give up when its reader is killed and when phosfs
# ends, or phosfs's FUSE loop, which joins its threads at exit, waits
# for it for ever, and every access to the mount hangs.
#   1. a reader killed while its read waits is gone at once (its read
#      answered), and holds nothing;
#   2. with a reader waiting and another that holds /events open and never
#      reads, SIGTERM ends phosfs within 5 s; the waiting reader ends, and
#      the mount point answers;
#   3. mounted again, with a killed reader gone and a holder that never
#      reads gone, `fusermount3 -u` unmounts it and phosfs ends.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/phos_run_rig.bash
. "${PHOS_SRCDIR:-$here/../..}/tests/phos_run_rig.bash"
rig_require
rig_mount
ev=$mnt/events

# ended PID SECONDS: whether PID is gone (or a zombie) within SECONDS.
ended() {
	local s
	for _ in $(seq $(($2 * 20))); do
		s=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
		if [ -z "$s" ] || [ "$s" = Z ]; then return 0; fi
		sleep 0.05
	done
	return 1
}
# A phosfs that does not end is killed, so that the test ends.
unwedge() {
	kill -9 "$rig_fs" 2>/dev/null
	umount -l "$mnt" 2>/dev/null
}

cat "$ev" >/dev/null 2>&1 &
k=$!
sleep 0.5
kill -9 "$k"
check "ended $k 2" "a reader killed while its read waits is gone within 2 s"

cat "$ev" >"$work/r1" 2>"$work/r1.err" &
r1=$!
sleep 1000 <"$ev" &
holder=$!
sleep 0.5
kill -TERM "$rig_fs"
if ended "$rig_fs" 5; then
	tap ok "SIGTERM ends phosfs within 5 s, one reader waiting and another never reading"
else
	tap "not ok" "SIGTERM ends phosfs within 5 s, one reader waiting and another never reading: it still runs"
	unwedge
fi
wait "$rig_fs" 2>/dev/null
check "ended $r1 2 && timeout 2 stat '$mnt' >/dev/null" \
	"the waiting reader ends, and the mount point answers ($(head -c 200 "$work/r1.err" | tr '\n' ' '))"
kill -9 "$holder" 2>/dev/null

"$rig_phosfs" --socket "$PHOS_SOCKET" --store "$store" --criu "$rig_criu" -f "$mnt" 2>>"$work/phosfs.log" &
rig_fs=$!
for _ in $(seq 100); do [ -e "$mnt/version" ] && break; sleep 0.05; done
cat "$ev" >/dev/null 2>&1 &
k=$!
sleep 1000 <"$ev" &
holder=$!
sleep 0.5
kill -9 "$k" "$holder"
ended "$k" 2 && ended "$holder" 2
if timeout 5 fusermount3 -u "$mnt" 2>"$work/fusermount.err" && ended "$rig_fs" 5; then
	tap ok "mounted again, its readers killed, fusermount3 -u unmounts it and phosfs ends"
else
	tap "not ok" "mounted again, its readers killed, fusermount3 -u unmounts it and phosfs ends: $(cat "$work/fusermount.err")"
	unwedge
fi
wait "$rig_fs" 2>/dev/null
done_testing
