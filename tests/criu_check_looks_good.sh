#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# The project's CRIU works on this kernel: `criu check` says "Looks good".
echo "1..1"
criu=${PHOS_CRIU:-deps/criu/sbin/criu}
if [ "$(id -u)" != 0 ]; then
	echo "ok 1 # skip criu check needs root"
	exit 0
fi
if [ ! -x "$criu" ]; then
	echo "ok 1 # skip no CRIU at $criu (run 'make deps')"
	exit 0
fi
out=$("$criu" check 2>&1)
echo "$out" | sed 's/^/# /'
if echo "$out" | grep -q "Looks good"; then
	echo "ok 1 - criu check: Looks good"
else
	echo "not ok 1 - criu check did not say Looks good"
fi
