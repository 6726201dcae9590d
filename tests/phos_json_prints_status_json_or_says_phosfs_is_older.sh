#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# phos status --json PID prints phosfs's /phos/PID/status.json, and phos
# ls --json a JSON array of every process's; where the mount has no
# status.json (a phosfs older than phos), each says so and exits 1. On a
# folder laid out as a mount (no FUSE needed).
set -u
here=$(cd "$(dirname "$0")" && pwd)
phos=${PHOS_CLI:-$here/../phos}
[ -x "$phos" ] || { echo "1..0 # SKIP phos not built"; exit 0; }
command -v python3 >/dev/null || { echo "1..0 # SKIP no python3"; exit 0; }
work=$(mktemp -d /tmp/phos-json.XXXXXX)
trap 'rm -rf "$work"' EXIT
export PHOS_MOUNT=$work/mnt
mkdir -p "$PHOS_MOUNT/123" "$PHOS_MOUNT/456" "$PHOS_MOUNT/789"
printf 'phosfs test\nstore %s\n' "$work/store" >"$PHOS_MOUNT/version"
for p in 123 456 789; do printf 'pid: %s\nstate: running\n' "$p" >"$PHOS_MOUNT/$p/status"; done
printf '{"pid": 123, "state": "running", "job": "none", "error": null, "steps_ms": {"park": 1.5}}\n' >"$PHOS_MOUNT/123/status.json"
printf '{"pid": 456, "state": "stopped", "error": "a reason"}\n' >"$PHOS_MOUNT/456/status.json"
printf '{"pid": 789, "state": "running"}\n' >"$PHOS_MOUNT/789/status.json"
n=0
failed=0
check() {
	n=$((n + 1))
	if eval "$1"; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=1; fi
}

check '"$phos" status --json 123 | python3 -c "import json,sys; j=json.load(sys.stdin); assert j == {\"pid\": 123, \"state\": \"running\", \"job\": \"none\", \"error\": None, \"steps_ms\": {\"park\": 1.5}}, j"' \
	"phos status --json PID prints PID's status.json, the same object"
check '"$phos" status 123 | grep -q "^state: running"' "phos status PID still prints the lines"
check '"$phos" ls --json | python3 -c "import json,sys; a=json.load(sys.stdin); assert sorted(j[\"pid\"] for j in a) == [123, 456, 789], a"' \
	"phos ls --json prints a JSON array of every process's status.json"
"$phos" status --json 999 >"$work/out" 2>"$work/err"
rc=$?
check '[ "$rc" = 1 ] && [ ! -s "$work/out" ] && grep -q "no such process" "$work/err"' "an unknown pid: exit 1, and it says so"
printf '{"pid": 789, "state": ' >"$PHOS_MOUNT/789/status.json"
"$phos" status --json 789 >"$work/out" 2>"$work/err"
rc=$?
check '[ "$rc" = 1 ] && grep -q "789/status.json: not a JSON object" "$work/err"' "a status.json that is not JSON: exit 1, and it says so"
rm "$PHOS_MOUNT/789/status.json"
"$phos" status --json 789 >"$work/out" 2>"$work/err"
rc=$?
check '[ "$rc" = 1 ] && [ ! -s "$work/out" ] && grep -q "this phosfs has no status.json (it is older than phos): use phos status 789, without --json" "$work/err"' \
	"no status.json (an older phosfs): phos status --json says so, exit 1"
"$phos" ls --json >"$work/out" 2>"$work/err"
rc=$?
check '[ "$rc" = 1 ] && [ ! -s "$work/out" ] && grep -q "this phosfs has no status.json" "$work/err"' \
	"and phos ls --json says so too, exit 1, printing no half array"
sed 's/^/# /' "$work/err"
echo "1..$n"
exit "$failed"
