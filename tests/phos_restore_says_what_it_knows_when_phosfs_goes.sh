#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# `phos restore --wait` whose phosfs dies under it says what it knows: the
# restore's job runs on its own, so the restore may go on and its process
# run. A lazy restore's fill is slowed (simcuda's bus at 20 MB/s), and
# phosfs is killed once the restored tree runs:
#   1. phos restore exits 1, saying that phosfs went away, that the
#      restore may have gone on, and the pid its process ran as;
#   2. that process runs.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/phos_run_rig.bash
. "${PHOS_SRCDIR:-$here/../..}/tests/phos_run_rig.bash"
rig_require
export SIMCUDA_H2D_MBPS=20
rig_mount
unset SIMCUDA_H2D_MBPS
"$phos" run -d --pid-ns -- "$counter" 64 >"$work/pid" 2>"$work/run.err"
pid=$(started "$work/pid" 30)
wait_line "$store/run/$pid.out" '^count 5' 30
"$phos" checkpoint "$pid" stop --name s --kill --wait >"$work/ck" 2>&1
wait_gone "$pid" 10
"$phos" restore "$store/$pid/s" lazy --wait >"$work/r" 2>"$work/rs" &
cli=$!
for _ in $(seq 100); do grep -q '^state: resumed' "$mnt/restores/1" 2>/dev/null && break; sleep 0.05; done
rpid=$(awk -F': ' '/^restored pid/ {print $2}' "$mnt/restores/1")
kill -9 "$rig_fs"
wait "$rig_fs" 2>/dev/null
umount -l "$mnt"
wait "$cli"
rc=$?
check "[ $rc = 1 ] && grep -q 'phosfs went away while it was' '$work/rs' && grep -q 'may have gone on' '$work/rs' &&
	grep -q 'pid ${rpid:-none}' '$work/rs'" "phos restore says that phosfs went away, and what it knows ($(head -c 300 "$work/rs"))"
check "[ -n '$rpid' ] && alive '$rpid'" "the restored process (${rpid:-none}) runs"
[ -n "$rpid" ] && note "$rpid"
# (phosfs is gone: the clean-up's stop of it is a no-op)
done_testing
