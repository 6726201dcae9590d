#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The Python package (python/): `pip install ./python` installs it without
# the network, and its pytest tests pass against a real phosfs on simcuda:
# hint(), checkpoint(), restore(), status(), events() and their errors.
# One TAP line for the install, then one for each pytest test (named by
# its docstring; python/tests/conftest.py writes them). pytest's own
# output goes to stderr.
#
# The tests of MOUNT/events and status.json skip, saying so, on a phosfs
# without them.
set -uo pipefail

skip() { echo "1..0 # SKIP $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root (FUSE and CRIU)"
[ -r /dev/fuse ] && [ -w /dev/fuse ] || skip "no /dev/fuse"
here=$(cd "$(dirname "$0")" && pwd)
src=${PHOS_SRCDIR:-$here/../..}
[ -f "$src/python/pyproject.toml" ] || skip "no python/ under $src (set PHOS_SRCDIR)"
criu=${PHOS_CRIU:-$src/deps/criu/sbin/criu}
[ -x "$criu" ] || skip "no CRIU (make deps)"

# The first Python 3 with pytest: $PHOS_PYTHON, python3, Debian's.
py=
for p in ${PHOS_PYTHON:-} python3 /usr/bin/python3; do
	if command -v "$p" >/dev/null && "$p" -c 'import pytest' 2>/dev/null; then
		py=$p
		break
	fi
done
[ -n "$py" ] || skip "no python3 with pytest (make deps installs python3-pytest)"

work=$(mktemp -d /tmp/phos-py-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
# Another user runs the package from here in a test.
chmod 755 "$work"
n=0
tap() { n=$((n + 1)); echo "$1 $n - $2"; }

# pip builds in the folder it is given: a copy, so the tree stays clean.
mkdir "$work/src"
(cd "$src/python" && tar --exclude=__pycache__ --exclude='*.egg-info' --exclude=build -cf - .) | tar -C "$work/src" -xf -
if "$py" -m pip install --no-build-isolation --no-index --no-deps --no-cache-dir --disable-pip-version-check \
	--root-user-action=ignore -q --target "$work/site" "$work/src" >"$work/pip.log" 2>&1 &&
	got=$(cd / && PYTHONPATH=$work/site "$py" -c 'import phos; print(phos.__file__, phos.hint())') &&
	[ "$got" = "$work/site/phos/__init__.py -1" ]; then
	tap ok "pip install ./python installs the package without the network, and it imports"
	path=$work/site
else
	tap "not ok" "pip install ./python installs the package without the network, and it imports"
	sed 's/^/# /' "$work/pip.log"
	echo "# import: ${got:-}"
	path=$src/python # the tests then run on the source
fi

(cd "$work" && PYTHONPATH=$path PYTHONDONTWRITEBYTECODE=1 PHOS_PY_TAP=$work/tap \
	"$py" -m pytest -p no:cacheprovider -q -rfEs --rootdir "$src/python/tests" "$src/python/tests") >&2
rc=$?
if [ -s "$work/tap" ]; then
	while IFS= read -r line; do
		case $line in
		"ok - "*) tap ok "${line#ok - }" ;;
		"not ok - "*) tap "not ok" "${line#not ok - }" ;;
		*) echo "$line" ;;
		esac
	done <"$work/tap"
fi
# pytest's own failures (a test that does not import, an error outside
# any test): exit status 2 and up.
if [ "$rc" -ge 2 ] || [ ! -s "$work/tap" ]; then
	tap "not ok" "pytest runs the package's tests (it exited $rc)"
fi
echo "1..$n"
