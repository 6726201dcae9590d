#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# No source file includes a header of a layer above its own
# (doc/ARCHITECTURE.md, "Which may call which"). From the bottom:
#   common/, image-format/  <  engine/  <  job/  <  phosfs/
# The tracer, which runs inside the application, sees only common/ and
# the public header of include/. cli/, the phos command, is a client of
# phosfs: it talks to it through the mount and the socket, and sees only
# common/, image-format/ and include/.
src=${PHOS_SRCDIR:-.}
cd "$src" || { echo "1..0 # skip no source tree at $src"; exit 0; }

rank() {
	case $1 in
	common|image-format|include) echo 0 ;;
	engine) echo 1 ;;
	job) echo 2 ;;
	phosfs) echo 3 ;;
	*) echo -1 ;;
	esac
}

n=0
for dir in common image-format engine job phosfs tracer cli; do
	n=$((n + 1))
	bad=""
	for f in "$dir"/*.c "$dir"/*.h; do
		[ -f "$f" ] || continue
		for inc in $(sed -n 's/^#include "\(\.\.\/\)\{1,\}\([a-z-]*\)\/.*"/\2/p' "$f"); do
			if [ "$dir" = tracer ]; then
				[ "$inc" = common ] || [ "$inc" = include ] || bad="$bad $f→$inc/"
			elif [ "$dir" = cli ]; then
				[ "$(rank "$inc")" -eq 0 ] || bad="$bad $f→$inc/"
			elif [ "$(rank "$inc")" -lt 0 ] || [ "$(rank "$inc")" -gt "$(rank "$dir")" ]; then
				bad="$bad $f→$inc/"
			fi
		done
	done
	if [ -z "$bad" ]; then
		echo "ok $n - $dir/ includes nothing above it"
	else
		echo "not ok $n - $dir/ includes a header above it:$bad"
	fi
done
echo "1..$n"
