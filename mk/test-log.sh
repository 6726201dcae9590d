#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# prove --exec: runs one test as prove would, and keeps what it printed in
# $PHOS_TEST_LOGS: its TAP in NAME.log, its diagnostics (stderr) in
# NAME.err, shown again once it ends, and its exit status in NAME.rc, so
# that mk/test-failures.sh can show a failed test's own words after the
# summary.
set -o pipefail
name=$(basename "$1")
log="$PHOS_TEST_LOGS/$name"
"$1" 2>"$log.err" | tee "$log.log"
rc=$?
cat "$log.err" >&2
echo "$rc" >"$log.rc"
exit "$rc"
