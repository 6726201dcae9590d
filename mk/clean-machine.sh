#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Runs the README's two set-up commands on a clean machine: a fresh Debian
# bookworm root with only the CUDA toolkit (../shared/fresh-machine, or
# $PHOS_FRESH_MACHINE), in a clone of this repository's committed state;
# then, on the same machine, the README's third way, the Debian packages
# (mk/package-check.sh builds, installs and tries them).
# Fails if any of them fails, or if a test skips there for want of
# something: a test that skips on a clean machine is an install step that
# `make deps` lacks. Only reasons a clean machine cannot remedy (no GPU)
# may skip.
#
#   mk/clean-machine.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
fresh=${PHOS_FRESH_MACHINE:-$here/../shared/fresh-machine}
[ -x "$fresh" ] || { echo "clean-machine: no fresh-machine script at $fresh (set PHOS_FRESH_MACHINE)" >&2; exit 1; }
# The commands, as the README's Set-up section gives them.
cmds=$(awk '/^## Set-up/ {s = 1; next} /^## / {s = 0} s && /^make / {sub(/ *#.*/, ""); print}' "$here/README.md")
[ "$(printf '%s\n' "$cmds" | wc -l)" = 2 ] || { echo "clean-machine: the README's Set-up has no two make commands" >&2; exit 1; }
cmd=$(printf '%s\n' "$cmds" | paste -sd'\n' | sed ':a;N;$!ba;s/\n/ \&\& /g')
cmd="$cmd && bash mk/package-check.sh"
log=$(mktemp /tmp/phos-clean-machine.XXXXXX)
trap 'rm -f "$log"' EXIT
echo "clean-machine: $cmd"
set +e
"$fresh" "$here" "$cmd" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" = 0 ] || { echo "clean-machine: FAILED: '$cmd' exited $rc on a clean machine" >&2; exit 1; }
skips=$(grep -E '\.\. skipped: |# SKIP' "$log" | grep -viE 'GPU' || true)
if [ -n "$skips" ]; then
	echo "clean-machine: FAILED: tests skip on a clean machine (a missing install step?):" >&2
	printf '%s\n' "$skips" >&2
	exit 1
fi
echo "clean-machine: ok: the README's commands and the packages pass on a clean machine, no test skipped"
