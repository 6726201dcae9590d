#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Every function of job/, engine/, phosfs/ and cli/ fits a page: about 80 lines
# from its opening brace to its closing one (doc/ARCHITECTURE.md). The project's
# functions open and close their bodies with a brace in column 0.
src=${PHOS_SRCDIR:-.}
cd "$src" || { echo "1..0 # skip no source tree at $src"; exit 0; }
max=80

n=0
for dir in job engine phosfs cli; do
	n=$((n + 1))
	long=$(awk -v max=$max '
		/^[A-Za-z_].*\(/ { sig = $0; sub(/\(.*/, "", sig); sub(/.*[ *]/, "", sig) }
		/^\{/ { start = FNR }
		/^\}/ && start { if (FNR - start - 1 > max) printf " %s:%s(%d)", FILENAME, sig, FNR - start - 1; start = 0 }
	' "$dir"/*.c)
	if [ -z "$long" ]; then
		echo "ok $n - every function of $dir/ is at most $max lines"
	else
		echo "not ok $n - functions of $dir/ longer than $max lines:$long"
	fi
done
echo "1..$n"
