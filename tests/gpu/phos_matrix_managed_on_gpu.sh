#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The framework matrix (tests/gpu/matrix.sh) for managed memory (CuPy's
# pool over cudaMallocManaged): phos runs it, refuses cow with the reason,
# and stop works.
b=${PHOS_BUNDLE:-gpu-bundle}
src=${PHOS_SRCDIR:-$b/..}
. "$b/share/gpu-matrix.sh"
python3 -c 'import cupy' 2>/dev/null || matrix_skip 5 "needs CuPy"
matrix_stop_only managed "managed memory" python3 "$src/tests/gpu/frameworks/cupy_kernels.py" --managed
