#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The framework matrix (tests/gpu/matrix.sh) for kernels written with
# @triton.jit, launched by Triton's own launcher.
b=${PHOS_BUNDLE:-gpu-bundle}
src=${PHOS_SRCDIR:-$b/..}
. "$b/share/gpu-matrix.sh"
python3 -c 'import triton' 2>/dev/null || matrix_skip 12 "needs Triton and PyTorch"
matrix triton python3 "$src/tests/gpu/frameworks/triton_kernels.py"
