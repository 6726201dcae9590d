#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Every manual page in man/ renders with man(1) without a warning.
dir=${PHOS_SRCDIR:-.}/man
if ! command -v man >/dev/null 2>&1; then
	echo "1..0 # SKIP man is not installed"
	exit 0
fi
set -- "$dir"/*.[1-9]
echo "1..$#"
n=0
for page in "$@"; do
	n=$((n + 1))
	warnings=$(LC_ALL=C.UTF-8 MANROFFSEQ='' man --warnings -l -Tutf8 "$page" 2>&1 >/dev/null)
	if [ -z "$warnings" ]; then
		echo "ok $n - $(basename "$page") renders without warnings"
	else
		echo "not ok $n - $(basename "$page"): $warnings"
	fi
done
