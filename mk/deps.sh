#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Installs what phos needs to build and test on Debian bookworm, and builds
# CRIU 4.2.1, with the patches in mk/criu-patches/ (each says what it does
# and where it comes from), into a project-local prefix. Idempotent: a
# second run only checks.
#
#   mk/deps.sh PREFIX      (PREFIX is where CRIU goes, e.g. deps/criu)
set -euo pipefail

prefix=${1:?usage: mk/deps.sh PREFIX}
criu_ver=4.2.1
# Debian sid has it: 4.1.1 (trixie) hangs dumping any process on Linux 6.18
# (at "Waiting for PID to trap", after the parasite), 4.2.1 does not.
criu_suite=sid
here=$(cd "$(dirname "$0")/.." && pwd)
case $prefix in /*) ;; *) prefix=$here/$prefix ;; esac
work=$here/deps/src

say() { printf 'deps: %s\n' "$*"; }
die() { printf 'deps: error: %s\n' "$*" >&2; exit 1; }

pkgs=(
	build-essential pkg-config git xz-utils ca-certificates perl patch
	libfuse3-dev fuse3 liburing-dev liblz4-dev libxxhash-dev
	# JSON: status.json, events, phos --json, phos-image info --json
	libjansson-dev
	# CRIU's build dependencies
	libprotobuf-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler
	python3-protobuf libnl-3-dev libnet1-dev libcap-dev libbsd-dev
	libgnutls28-dev libnftables-dev uuid-dev libaio-dev iproute2
	# the independent reader of FORMAT.md in tests/; the examples' test;
	# the man page test; pkill and pgrep for the GPU tests
	python3 python3-xxhash python3-lz4 rsync man-db procps
	# the metrics test's parser of the Prometheus text format
	python3-prometheus-client
	# the Debian packages (debian/, mk/package-check.sh), and lintian, which
	# checks their copyright file
	dpkg-dev debhelper fakeroot lintian
	# the Python package's tests (python/): pytest, and pip installing it
	# from the source tree without the network
	python3-pytest python3-pip python3-setuptools python3-wheel
	# the Slurm recipe's test: a Slurm of one node (examples/slurm/), and
	# the Kubernetes recipe's, which reads its pod spec (examples/kubernetes/)
	slurmctld slurmd slurm-client munge python3-yaml
)

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
	[ "$(id -u)" = 0 ] || die "need root to install: ${missing[*]} (run: sudo make deps)"
	say "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
	say "Debian packages present"
fi

# CUDA toolkit: only the compiler and headers are needed here; the driver is
# replaced by tests/simcuda on machines without a GPU.
cuda=${CUDA_HOME:-/usr/local/cuda}
[ -f "$cuda/include/cuda.h" ] || die "no cuda.h under $cuda: install the CUDA 13.0 toolkit (cuda-toolkit-13-0) or set CUDA_HOME"
[ -x "$cuda/bin/nvcc" ] || say "warning: no nvcc under $cuda: tests that need cubins will skip; install cuda-nvcc-13-0 to run them"

# CRIU, from Debian's source tarball. Bookworm's CRIU 3.17 fails on
# current kernels (vDSO area bounds), trixie's 4.1.1 on Linux 6.18.
patches=("$here"/mk/criu-patches/*.patch)
patches_id=$(cat "${patches[@]}" | sha256sum | cut -c1-16)
if [ -x "$prefix/sbin/criu" ] && "$prefix/sbin/criu" --version 2>/dev/null | grep -q "Version: $criu_ver" &&
	[ "$(cat "$prefix/criu-patches" 2>/dev/null)" = "$patches_id" ]; then
	say "CRIU $criu_ver present in $prefix, with phos's patches"
else
	mkdir -p "$work/apt/lists/partial"
	tarball=$work/criu_$criu_ver.orig.tar.xz
	if [ ! -f "$tarball" ]; then
		uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
		[ -n "$uri" ] || uri=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
		[ -n "$uri" ] || die "cannot find the Debian mirror in /etc/apt; put criu_$criu_ver.orig.tar.xz in $work by hand"
		echo "deb-src $uri $criu_suite main" >"$work/apt/src.list"
		# Mirrors may serve sid's index after its Valid-Until: the index is
		# still signed, and the tarball is checked against it.
		o=(-oDir::Etc::SourceList="$work/apt/src.list" -oDir::Etc::SourceParts=/dev/null
			-oDir::State::Lists="$work/apt/lists" -oAPT::Sandbox::User=root -oAcquire::Check-Valid-Until=false)
		say "fetching criu_$criu_ver.orig.tar.xz"
		apt-get "${o[@]}" update -qq || die "cannot read Debian $criu_suite's source index (above)"
		# Where the .dsc is absent from the mirror, this exits non-zero
		# after fetching the tarball; the tarball is what counts.
		(cd "$work" && apt-get "${o[@]}" source --download-only -qq "criu=$criu_ver-*" >/dev/null 2>&1) || true
		[ -f "$tarball" ] || (cd "$work" && apt-get "${o[@]}" source --download-only -qq criu >/dev/null 2>&1) || true
		[ -f "$tarball" ] || die "could not fetch criu_$criu_ver.orig.tar.xz from Debian $criu_suite"
	fi
	rm -rf "$work/criu-$criu_ver"
	tar -C "$work" -xf "$tarball"
	for p in "${patches[@]}"; do
		say "applying $(basename "$p")"
		patch -d "$work/criu-$criu_ver" -p1 -s --no-backup-if-mismatch <"$p" || die "$(basename "$p") does not apply to CRIU $criu_ver"
	done
	say "building CRIU $criu_ver"
	make -C "$work/criu-$criu_ver" -j"$(nproc)" criu >"$work/criu-build.log" 2>&1 ||
		{ tail -30 "$work/criu-build.log" >&2; die "CRIU build failed; log in $work/criu-build.log"; }
	install -D -m 0755 "$work/criu-$criu_ver/criu/criu" "$prefix/sbin/criu"
	echo "$patches_id" >"$prefix/criu-patches"
fi
# The plugin API header, for phos's CRIU plugin (criu-plugin/).
if [ ! -f "$prefix/include/criu-plugin.h" ]; then
	if [ -f "$work/criu-$criu_ver/criu/include/criu-plugin.h" ]; then
		install -D -m 0644 "$work/criu-$criu_ver/criu/include/criu-plugin.h" "$prefix/include/criu-plugin.h"
	else
		mkdir -p "$prefix/include"
		tar -xOf "$work/criu_$criu_ver.orig.tar.xz" "criu-$criu_ver/criu/include/criu-plugin.h" >"$prefix/include/criu-plugin.h" ||
			die "cannot find criu-plugin.h: remove $prefix and run make deps again"
	fi
fi

if [ "$(id -u)" = 0 ]; then
	if out=$("$prefix/sbin/criu" check 2>&1); then
		say "criu check: $(printf '%s\n' "$out" | tail -1)"
	else
		say "warning: criu check failed on this kernel: $(printf '%s\n' "$out" | tail -1)"
	fi
else
	say "not root: skipping criu check"
fi
