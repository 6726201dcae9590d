#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# debian/README.Debian names each patch in mk/criu-patches/, as
# debian/rules demands before it builds the packages: a patch added
# without a word there fails here, in seconds, not in the package build.
set -u
patches=$(ls mk/criu-patches/*.patch 2>/dev/null)
if [ -z "$patches" ]; then
	echo "1..0 # skip no mk/criu-patches/ here (run from the source tree)"
	exit 0
fi
echo "1..$(echo "$patches" | wc -l)"
n=0
for p in $patches; do
	n=$((n + 1))
	name=$(basename "$p")
	if grep -qF "$name" debian/README.Debian; then
		echo "ok $n - README.Debian names $name"
	else
		echo "not ok $n - README.Debian does not name $name: say there what it does"
	fi
done
