#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Recopy checkpoints on a real GPU: the runs of phos_cow_on_gpu, with
# recopy (the image is the state at the final stall, t2). See there.
here=$(cd "$(dirname "$0")" && pwd)
PHOS_GPU_PROTOCOL=recopy PHOS_COW_ITERATIONS=${PHOS_RECOPY_ITERATIONS:-20} exec "$here/phos_cow_on_gpu" "$@"
