#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The framework matrix (tests/gpu/matrix.sh) for CuPy: its memory pool,
# and a RawKernel compiled by NVRTC.
b=${PHOS_BUNDLE:-gpu-bundle}
src=${PHOS_SRCDIR:-$b/..}
. "$b/share/gpu-matrix.sh"
python3 -c 'import cupy' 2>/dev/null || matrix_skip 12 "needs CuPy"
matrix cupy python3 "$src/tests/gpu/frameworks/cupy_kernels.py"
