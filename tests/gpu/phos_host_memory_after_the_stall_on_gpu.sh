#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Host memory saved after the stall, on a real GPU: case 1 of
# phos_cow_on_gpu with tests/apps/host_writer, whose thread rewrites 1 GiB
# of host memory (plain, MADV_DONTFORK and MADV_WIPEONFORK mappings) while
# the GPU writes a pinned buffer by DMA, round after round. Each cow
# checkpoint's pages are saved from a snapshot while the process runs
# (phos's CRIU, --snapshot-pages); the running process and its restore
# check every word. See phos_cow_on_gpu.
here=$(cd "$(dirname "$0")" && pwd)
PHOS_COW_HOST=1 PHOS_COW_MIB=${PHOS_HOST_MIB:-1024} PHOS_COW_ITERATIONS=${PHOS_HOST_ITERATIONS:-20} \
	exec "$here/phos_cow_on_gpu" "$@"
