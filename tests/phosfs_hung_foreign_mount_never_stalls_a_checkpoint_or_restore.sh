#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# A FUSE mount phos does not need, whose daemon does not answer, never
# stalls a checkpoint or a restore. A job of `phos run --pid-ns` has a
# mount namespace of its own, a copy of the machine's mounts: a second
# FUSE file system mounted when the job started is in it. Its daemon is
# then stopped (SIGSTOP): every call that reaches it waits for ever.
#   1. the job's stop checkpoint is published within 30 s;
#   2. killed, its image restores within 30 s and goes on counting;
#   3. with the daemon answering again, the image restores again;
#   4. a job whose working directory is on that mount (it uses it) is
#      checkpointed; with the daemon stopped, its restore fails within
#      phosfs's --restore-timeout (5 s here), naming the mount, and
#      phosfs goes on answering;
#   5. with the daemon stopped, a checkpoint of another such job fails
#      within --dump-timeout (5 s here), naming the mount, and the job
#      runs on.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/phos_run_rig.bash
. "${PHOS_SRCDIR:-$here/../..}/tests/phos_run_rig.bash"
rig_require
rig_mount

# The foreign mount: a phosfs of its own, which phos never uses here.
foreign=$work/foreign
mkdir -p "$foreign/mnt"
"$rig_phosfs" --socket "$foreign/sock" --store "$foreign/store" --criu "$rig_criu" -f "$foreign/mnt" \
	2>"$foreign/log" &
ffs=$!
for _ in $(seq 100); do [ -e "$foreign/mnt/version" ] && break; sleep 0.05; done
stopped_cleanup() {
	kill -CONT "$ffs" 2>/dev/null
	kill "$ffs" 2>/dev/null
	wait "$ffs" 2>/dev/null
	umount -l "$foreign/mnt" 2>/dev/null
	rig_cleanup
}
trap stopped_cleanup EXIT

"$phos" run -d --pid-ns -- "$counter" 4 >"$work/pid" 2>"$work/run.err"
pid=$(started "$work/pid" 30)
out=$store/run/$pid.out
wait_line "$out" '^count 5' 30
kill -STOP "$ffs"
t0=$SECONDS
timeout 60 "$phos" checkpoint "$pid" stop --name s --wait >"$work/ck" 2>&1
rc=$?
check "[ $rc = 0 ] && [ $((SECONDS - t0)) -le 30 ]" \
	"with a foreign FUSE daemon stopped, the stop checkpoint is published in $((SECONDS - t0)) s (rc $rc: $(tail -1 "$work/ck"))"

c0=$(last_count "$out")
init=$(job_init "$pid") && kill -9 "$init"
kill -9 "$pid" 2>/dev/null
wait_gone "$pid" 10
t0=$SECONDS
r=$(timeout 60 "$phos" restore "$store/$pid/s" 2>"$work/rs1")
rc=$?
case $r in '' | *[!0-9]*) ;; *) note "$r" ;; esac
for _ in $(seq 50); do [ "$(last_count "$out")" -gt "$((c0 + 2))" ] && break; sleep 0.1; done
check "[ $rc = 0 ] && [ $((SECONDS - t0)) -le 30 ] && [ \"\$(last_count '$out')\" -gt $((c0 + 2)) ]" \
	"the image restores in $((SECONDS - t0)) s and counts on (rc $rc: $(tail -1 "$work/rs1"))"

kill -CONT "$ffs"
case $r in '' | *[!0-9]*) ;; *)
	init=$(job_init "$r") && kill -9 "$init"
	kill -9 "$r" 2>/dev/null
	wait_gone "$r" 10
	;;
esac
r=$(timeout 60 "$phos" restore "$store/$pid/s" 2>"$work/rs2")
rc=$?
case $r in '' | *[!0-9]*) ;; *) note "$r" ;; esac
check "[ $rc = 0 ]" "with the daemon answering again, the image restores again ($(tail -1 "$work/rs2"))"

# 4: phosfs again, with a restore timeout of 5 s.
kill "$rig_fs"
wait "$rig_fs" 2>/dev/null
"$rig_phosfs" --socket "$PHOS_SOCKET" --store "$store" --criu "$rig_criu" --restore-timeout 5 --dump-timeout 5 -f "$mnt" \
	2>>"$work/phosfs.log" &
rig_fs=$!
for _ in $(seq 100); do [ -e "$mnt/version" ] && break; sleep 0.05; done
(cd "$foreign/mnt" && exec "$phos" run -d --pid-ns -- "$counter" 4) >"$work/pid2" 2>"$work/run2.err"
pid2=$(started "$work/pid2" 30)
wait_line "$store/run/$pid2.out" '^count 5' 30
(cd "$foreign/mnt" && exec "$phos" run -d --pid-ns -- "$counter" 4) >"$work/pid3" 2>"$work/run3.err"
pid3=$(started "$work/pid3" 30)
wait_line "$store/run/$pid3.out" '^count 5' 30
"$phos" checkpoint "$pid2" stop --name u --wait >"$work/ck2" 2>&1
kill -STOP "$ffs"
init=$(job_init "$pid2") && kill -9 "$init"
kill -9 "$pid2" 2>/dev/null
wait_gone "$pid2" 10
t0=$SECONDS
timeout 60 "$phos" restore "$store/$pid2/u" >"$work/r3" 2>"$work/rs3"
rc=$?
check "[ $rc = 1 ] && [ $((SECONDS - t0)) -le 15 ] && grep -q 'foreign/mnt' '$work/rs3' && timeout 2 cat '$mnt/version' >/dev/null" \
	"with the daemon of the mount its job uses stopped, the restore fails in $((SECONDS - t0)) s naming it (rc $rc: $(tail -1 "$work/rs3"))"
t0=$SECONDS
timeout 60 "$phos" checkpoint "$pid3" stop --name v --wait >"$work/ck3" 2>&1
rc=$?
c3=$(last_count "$store/run/$pid3.out")
for _ in $(seq 50); do [ "$(last_count "$store/run/$pid3.out")" -gt "$((c3 + 2))" ] && break; sleep 0.1; done
check "[ $rc = 1 ] && [ $((SECONDS - t0)) -le 20 ] && grep -q 'foreign/mnt' '$work/ck3' && [ \"\$(last_count '$store/run/$pid3.out')\" -gt $((c3 + 2)) ]" \
	"with that daemon stopped, a checkpoint of another job on it fails in $((SECONDS - t0)) s naming it, and the job runs on (rc $rc: $(tail -1 "$work/ck3"))"
kill -CONT "$ffs"
done_testing
