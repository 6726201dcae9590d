#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The framework matrix (tests/gpu/matrix.sh) for torch.compile with
# mode="reduce-overhead": Inductor's kernels replayed as CUDA graphs.
b=${PHOS_BUNDLE:-gpu-bundle}
src=${PHOS_SRCDIR:-$b/..}
. "$b/share/gpu-matrix.sh"
python3 -c 'import torch' 2>/dev/null || matrix_skip 12 "needs PyTorch"
matrix torch.compile-graphs python3 "$src/tests/gpu/frameworks/torch_compile.py" --mode reduce-overhead
