#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# After a failed `make check`: prints, for each test that failed, the end
# of its TAP and of its diagnostics, from the logs that mk/test-log.sh
# kept in DIR. A CI log keeps only its tail; this puts the cause there.
dir=$1
for rc in "$dir"/*.rc; do
	[ -e "$rc" ] || continue
	name=$(basename "$rc" .rc)
	if [ "$(cat "$rc")" != 0 ] || grep -q '^not ok' "$dir/$name.log"; then
		echo "---- $name (exit $(cat "$rc")): its TAP, last 20 lines ----"
		tail -n 20 "$dir/$name.log"
		echo "---- $name: its diagnostics, last 40 lines ----"
		tail -n 40 "$dir/$name.err"
	fi
done
