#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Fills a self-contained folder for a GPU machine that has the NVIDIA driver
# and CUDA but no package registry: CRIU with the shared libraries it needs
# beyond glibc, and the GPU tests with the programs they run.
#
#   mk/gpu-bundle.sh BUNDLE bin:PROGRAM... lib:LIBRARY... test:TEST_SCRIPT...
#                    share:FILE:NAME...
# (the GPU test programs are already built into BUNDLE/progs by make;
# share: files are what the tests source, in BUNDLE/share/NAME)
#
# Each PROGRAM goes to libexec/, with the shared libraries it needs beyond
# glibc in lib/ and a wrapper in bin/ that points the loader there.
set -euo pipefail
bundle=$1
shift

rm -rf "$bundle/bin" "$bundle/lib" "$bundle/libexec" "$bundle/tests" "$bundle/share"
mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/libexec" "$bundle/tests" "$bundle/share"

for item in "$@"; do
	kind=${item%%:*} path=${item#*:}
	case $kind in
	bin)
		name=$(basename "$path")
		install -m 0755 "$path" "$bundle/libexec/$name"
		# glibc's own libraries are the GPU machine's; everything else travels.
		ldd "$path" | awk '/=> \// { print $3 }' | while read -r lib; do
			case $(basename "$lib") in
			libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | ld-linux*) ;;
			*) cp -L "$lib" "$bundle/lib/" ;;
			esac
		done
		cat >"$bundle/bin/$name" <<WRAP
#!/bin/sh
# $name with the libraries carried in this bundle.
here=\$(cd "\$(dirname "\$0")/.." && pwd)
LD_LIBRARY_PATH=\$here/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec "\$here/libexec/$name" "\$@"
WRAP
		chmod 0755 "$bundle/bin/$name"
		;;
	lib)
		install -m 0755 "$path" "$bundle/lib/"
		;;
	test)
		install -m 0755 "$path" "$bundle/tests/$(basename "${path%.sh}")"
		;;
	share)
		install -m 0644 "${path%%:*}" "$bundle/share/${path#*:}"
		;;
	*)
		echo "gpu-bundle: unknown item $item" >&2
		exit 2
		;;
	esac
done
for p in "$bundle"/progs/*; do
	[ -x "$p" ] && install -m 0755 "$p" "$bundle/tests/"
done

cat >"$bundle/run-checks" <<'RUN'
#!/usr/bin/env bash
# Runs the GPU suite of this bundle and reports TAP, through prove where
# the machine has it, else through a minimal runner with the same verdict.
here=$(cd "$(dirname "$0")" && pwd)
export PHOS_CRIU=$here/bin/criu PHOS_BUNDLE=$here
# PHOS_GPU_TESTS="NAME..." runs those tests alone (names as in tests/).
tests=()
if [ -n "${PHOS_GPU_TESTS:-}" ]; then
	for n in $PHOS_GPU_TESTS; do
		[ -x "$here/tests/$n" ] || { echo "run-checks: no test $n in $here/tests" >&2; exit 2; }
		tests+=("$here/tests/$n")
	done
else
	tests=("$here"/tests/*)
fi
if command -v prove >/dev/null 2>&1; then
	exec prove "$@" "${tests[@]}"
fi
failed=0
for t in "${tests[@]}"; do
	out=$("$t" 2>&1)
	rc=$?
	printf '%s\n' "$out" | sed "s|^|$(basename "$t"): |"
	plan=$(printf '%s\n' "$out" | grep -m1 -E '^1\.\.[0-9]+' | cut -d. -f3 | cut -d' ' -f1)
	nok=$(printf '%s\n' "$out" | grep -c '^ok ')
	bad=$(printf '%s\n' "$out" | grep -c '^not ok ')
	if [ "$rc" != 0 ] || [ -z "$plan" ] || [ "$bad" != 0 ] || [ "$nok" != "$plan" ]; then
		echo "$(basename "$t") .. FAILED (exit $rc, plan ${plan:-none}, $nok ok, $bad not ok)"
		failed=1
	else
		echo "$(basename "$t") .. ok"
	fi
done
if [ $failed = 0 ]; then echo "All tests successful."; echo "Result: PASS"; else echo "Result: FAIL"; fi
exit $failed
RUN
chmod 0755 "$bundle/run-checks"
size=$(du -sm "$bundle" | cut -f1)
if [ "$size" -gt 64 ]; then
	echo "gpu-bundle: $bundle is $size MiB, over the 64 MiB limit" >&2
	exit 1
fi
