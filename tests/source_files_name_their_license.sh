#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Every source file names its license in an SPDX-License-Identifier line
# near its top, and that license is the one its place in the tree has
# (COPYING): LGPL-2.1-or-later for what is linked or loaded into other
# programs (tracer/, include/, common/, image-format/'s library, python/,
# and the library's man pages), MIT for the image format's specification,
# GPL-2.0-only for the rest. Each license named has its text in LICENSES/.
src=${PHOS_SRCDIR:-.}
cd "$src" || { echo "1..0 # skip no source tree at $src"; exit 0; }
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	files=$(git ls-files -co --exclude-standard)
else
	files=$(find . -type f ! -path './.git/*' ! -path './build*' ! -path './deps/*' ! -path './gpu-bundle/*' | sed 's|^\./||')
fi

# The license a path must name.
want() {
	case $1 in
	image-format/FORMAT.md | man/phos-image.5) echo MIT ;;
	image-format/phos-image.c) echo GPL-2.0-only ;;
	man/libphos.3 | man/phos_checkpoint_hint.3) echo LGPL-2.1-or-later ;;
	tracer/* | include/* | common/* | python/* | image-format/*) echo LGPL-2.1-or-later ;;
	*) echo GPL-2.0-only ;;
	esac
}

# Whether a path is a source file: code, scripts, build files, manual
# pages and documents. Not data (bench/results/), not the license texts,
# the CRIU patches (COPYING) or debian/'s control files (debian/copyright).
is_source() {
	case $1 in
	LICENSES/* | COPYING | bench/results/* | mk/criu-patches/* | *.pyc | */__pycache__/* | .gitignore | */.gitignore) return 1 ;;
	debian/rules) return 0 ;;
	debian/*) return 1 ;;
	*.c | *.h | *.cu | *.sh | *.bash | *.py | *.md | *.[1-8] | *.yaml | *.service | *.sbatch | *.cron | *.conf | *.toml | *.in | Makefile | */Makefile) return 0 ;;
	esac
	head -c 2 "$1" 2>/dev/null | grep -q '^#!'
}

n=0 checked=0 none="" wrong=""
for f in $files; do
	[ -f "$f" ] || continue
	is_source "$f" || continue
	checked=$((checked + 1))
	got=$(head -n 3 "$f" | sed -n 's/.*SPDX-License-Identifier: \([A-Za-z0-9.+-]*\).*/\1/p' | head -n 1)
	if [ -z "$got" ]; then
		none="$none $f"
	elif [ "$got" != "$(want "$f")" ]; then
		wrong="$wrong $f($got, not $(want "$f"))"
	fi
done

n=$((n + 1))
if [ "$checked" -gt 100 ] && [ -z "$none" ]; then
	echo "ok $n - each of $checked source files names its license in its first 3 lines"
else
	echo "not ok $n - source files without an SPDX-License-Identifier line in their first 3 lines ($checked looked at):$none"
fi
n=$((n + 1))
if [ -z "$wrong" ]; then
	echo "ok $n - each names the license its folder has (COPYING)"
else
	echo "not ok $n - source files that name a license their folder does not have:$wrong"
fi
n=$((n + 1))
missing=""
for l in GPL-2.0-only LGPL-2.1-or-later MIT; do
	[ -s "LICENSES/$l.txt" ] || missing="$missing LICENSES/$l.txt"
	grep -q "$l" COPYING 2>/dev/null || missing="$missing COPYING($l)"
done
if [ -z "$missing" ]; then
	echo "ok $n - each license has its text in LICENSES/ and is in COPYING"
else
	echo "not ok $n - missing:$missing"
fi
echo "1..$n"
