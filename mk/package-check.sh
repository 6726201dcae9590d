#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Builds phos's Debian packages (debian/: phos and libphosimg-dev), installs
# them, and tries them from their installed paths:
#   - the files are where debian/ puts them, and the systemd unit names them;
#   - phosfs finds the CRIU and the CRIU plugin the package carries, and
#     phos the libphos.so, with nothing set in the environment;
#   - the demo (examples/demo.sh) runs with the installed phosfs, phos,
#     phos-image, libphos.so and CRIU; only its program, examples/counter,
#     and simcuda, the software CUDA driver it runs on where there is no
#     GPU, come from the build tree;
#   - a small program built with `pkg-config --cflags --libs --static
#     phosimg` writes an image with libphosimg, and phos-image verifies it.
# As root, after `make deps all` (CI runs it on a clean machine, after the
# README's set-up commands). The machine keeps the packages: `apt-get
# remove phos libphosimg-dev` takes them away.
#
#   mk/package-check.sh [DIR]   (DIR: install the .deb files there instead
#                                of building them)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/${BUILD:-build}
say() { printf 'package-check: %s\n' "$*"; }
die() { printf 'package-check: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (it installs the packages; the demo mounts FUSE and runs CRIU)"
for f in examples/counter simcuda/libcuda.so.1; do
	[ -e "$build/$f" ] || die "no $build/$f: run 'make all' first (the demo's program and simcuda come from the build tree)"
done
work=$(mktemp -d /tmp/phos-package.XXXXXX)
trap 'rm -rf "$work"' EXIT

debs=${1:-}
if [ -z "$debs" ]; then
	# In a copy of the sources (git's files, committed or not, and the CRIU
	# make deps built), so that the working tree gets no build products;
	# dpkg-buildpackage writes the .deb files beside it, in $work.
	say "building the packages (dpkg-buildpackage -us -uc -b)"
	mkdir "$work/src" "$work/src/deps"
	git -C "$here" ls-files -z -co --exclude-standard |
		while IFS= read -r -d '' f; do [ -e "$here/$f" ] && printf '%s\0' "$f"; done |
		tar -C "$here" --null -T - -cf - | tar -C "$work/src" -xf -
	[ -d "$here/deps/criu" ] || die "no deps/criu: run 'make deps' first"
	ln -s "$here/deps/criu" "$work/src/deps/criu"
	(cd "$work/src" && dpkg-buildpackage -us -uc -b -j"$(nproc)") >"$work/build.log" 2>&1 ||
		{ tail -40 "$work/build.log" >&2; die "dpkg-buildpackage failed (above)"; }
	debs=$work
fi
debs=$(cd "$debs" && pwd)
pkgs=("$debs"/phos_*.deb "$debs"/libphosimg-dev_*.deb)
for p in "${pkgs[@]}"; do [ -f "$p" ] || die "no $(basename "$p") in $debs"; done
say "installing $(cd "$debs" && echo phos_*.deb libphosimg-dev_*.deb)"
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >"$work/apt.log" 2>&1 ||
	{ tail -20 "$work/apt.log" >&2; die "apt-get install of the packages failed (above)"; }

fails=0
check() { # check WHAT COMMAND...: runs COMMAND, says WHAT and whether it held
	local what=$1
	shift
	if "$@"; then say "ok: $what"; else say "FAILED: $what"; fails=$((fails + 1)); fi
}

# ---- the files ---------------------------------------------------------------
libphos=$(dpkg -L phos | grep '/libphos\.so$' || true)
[ -n "$libphos" ] || die "the package phos has no libphos.so"
installed() { for f; do [ -e "$f" ] || { echo "  missing: $f" >&2; return 1; }; done; }
check "phos's files are installed" installed /usr/sbin/phosfs /usr/bin/phos /usr/bin/phos-image "$libphos" \
	/usr/libexec/phos/criu /usr/libexec/phos/criu-plugins/phos_devices.so /usr/share/man/man8/phosfs.8.gz \
	/usr/share/man/man1/phos.1.gz /lib/systemd/system/phosfs.service /usr/lib/tmpfiles.d/phos.conf \
	/usr/share/doc/phos/README.Debian /usr/share/doc/phos/criu-patches
check "libphosimg-dev's files are installed" installed /usr/include/phos/phosimg.h /usr/include/phos.h \
	"$(dpkg -L libphosimg-dev | grep '/libphosimg\.a$')" "$(dpkg -L libphosimg-dev | grep '/phosimg\.pc$')"
# lintian reads debian/copyright (DEP-5) against the source package, git's
# files: no tag of it may be about the copyright or a license.
licenses_clean() {
	command -v lintian >/dev/null || { echo "  no lintian here (make deps installs it)" >&2; return 1; }
	local d=$work/lint/phos-0 tags
	mkdir -p "$d"
	git -C "$here" ls-files -z -co --exclude-standard | (cd "$here" && xargs -0 cp --parents -t "$d") &&
		(cd "$work/lint" && dpkg-source -b phos-0 >"$work/lint.log" 2>&1) ||
		{ tail -5 "$work/lint.log" >&2; return 1; }
	tags=$(lintian --tag-display-limit 0 "$work"/lint/*.dsc 2>&1 | grep -Ei 'copyright|licen[cs]e|file-pattern' || true)
	[ -z "$tags" ] || { printf '  %s\n' "$tags" >&2; return 1; }
}
check "lintian finds nothing to say of the copyright file and the licenses" licenses_clean
unit_runs() {
	local exe
	for key in ExecStart ExecStopPost; do
		exe=$(sed -n "s/^$key=-\?\([^ ]*\).*/\1/p" /lib/systemd/system/phosfs.service)
		[ -x "$exe" ] || { echo "  phosfs.service's $key names $exe, which is no program here" >&2; return 1; }
	done
	[ "$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' /lib/systemd/system/phosfs.service)" = /usr/sbin/phosfs ]
}
check "phosfs.service runs /usr/sbin/phosfs, and fusermount3 after it" unit_runs
check "the CRIU the package carries is the patched one" eval '/usr/libexec/phos/criu --help 2>&1 | grep -q -- --snapshot-pages'

# ---- the paths compiled in -----------------------------------------------------
# phosfs says at start when it found no CRIU with phos's patches or no
# plugins; phos run preloads the libphos.so it was built to find.
defaults() {
	local mnt=$work/mnt fs rc=0 pid
	mkdir -p "$mnt"
	env -u PHOS_CRIU -u PHOS_CRIU_PLUGINS -u PHOS_LIBPHOS /usr/sbin/phosfs --socket "$work/phosfs.sock" \
		--store "$work/store" -f "$mnt" 2>"$work/phosfs.err" &
	fs=$!
	for _ in $(seq 50); do [ -e "$mnt/version" ] && break; sleep 0.1; done
	if [ ! -e "$mnt/version" ]; then
		echo "  phosfs did not mount:" >&2
		cat "$work/phosfs.err" >&2
		rc=1
	elif grep -E 'no --snapshot-pages|no CRIU plugins' "$work/phosfs.err" >&2; then
		rc=1
	else
		# shellcheck disable=SC2016 # the job's shell expands it
		pid=$(env -u PHOS_LIBPHOS PHOS_MOUNT="$mnt" PHOS_SOCKET="$work/phosfs.sock" \
			/usr/bin/phos run -- /bin/sh -c 'echo "$LD_PRELOAD"' 2>"$work/run.err") ||
			{ cat "$work/run.err" >&2; rc=1; }
		[ "$(cat "$work/store/run/$pid.out" 2>/dev/null)" = "$libphos" ] ||
			{ echo "  phos run preloaded '$(cat "$work/store/run/$pid.out" 2>/dev/null)', not $libphos" >&2; rc=1; }
	fi
	kill "$fs" 2>/dev/null
	wait "$fs" 2>/dev/null || true
	return $rc
}
check "phosfs finds the package's CRIU and plugin, phos its libphos.so, with no environment" defaults

# ---- the demo, from the installed paths ----------------------------------------------
# demo.sh runs $PHOS_BUILD/phos-image: a folder where that is the installed one.
mkdir "$work/bin"
ln -s /usr/bin/phos-image "$work/bin/phos-image"
demo() {
	(cd "$here" && PHOS_BUILD="$work/bin" PHOS_PHOSFS=/usr/sbin/phosfs PHOS_CLI=/usr/bin/phos \
		PHOS_LIBPHOS="$libphos" PHOS_CRIU=/usr/libexec/phos/criu \
		PHOS_COUNTER="$build/examples/counter" PHOS_SIMCUDA="$build/simcuda" bash examples/demo.sh)
}
check "the demo runs from the installed paths" demo

# ---- libphosimg-dev ------------------------------------------------------------
cat >"$work/img.c" <<'EOF'
/* Writes a small image with libphosimg, reads it back, and calls phos_hint. */
#include <phos.h>
#include <phos/phosimg.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	static unsigned char data[3 << 12], back[3 << 12];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)(i * 7);
	phosimg_writer *w;
	phosimg_writer_opts o = { .chunk_size = 4096, .lz4 = true };
	static const char cmd[] = "img";
	phosimg_meta meta = { .pid = 1, .cmdline = cmd, .cmdline_len = sizeof(cmd), .protocol = PHOSIMG_PROTO_STOP };
	phosimg_object ob = { .va = 0x10000, .size = sizeof(data) };
	uint32_t id;
	if (argc != 2 || phosimg_writer_create(argv[1], &o, &w) || phosimg_writer_set_meta(w, &meta) ||
	    phosimg_writer_add_object(w, &ob, &id))
		return fprintf(stderr, "img: %s\n", phosimg_last_error()), 1;
	for (uint64_t off = 0; off < sizeof(data); off += 4096)
		if (phosimg_writer_put(w, id, off, data + off, 4096))
			return fprintf(stderr, "img: %s\n", phosimg_last_error()), 1;
	phosimg *img;
	if (phosimg_writer_finish(w) || phosimg_open(argv[1], &img) || phosimg_read(img, id, 0, back, sizeof(back)) ||
	    phosimg_verify(img))
		return fprintf(stderr, "img: %s\n", phosimg_last_error()), 1;
	phosimg_close(img);
	if (memcmp(data, back, sizeof(data)))
		return fprintf(stderr, "img: the image does not read back\n"), 1;
	return phos_hint() == -1 ? 0 : 1;
}
EOF
dev() {
	# shellcheck disable=SC2046 # pkg-config's words
	cc -std=c11 -Wall -Wextra -Werror -o "$work/img" "$work/img.c" $(pkg-config --cflags --libs --static phosimg) &&
		"$work/img" "$work/image" && phos-image verify "$work/image" >/dev/null
}
check "a program built with pkg-config --static phosimg writes an image that phos-image verifies" dev

[ "$fails" = 0 ] || die "$fails check(s) failed (above)"
say "ok: the packages build, install and run"
