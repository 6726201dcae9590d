#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The framework matrix (tests/gpu/matrix.sh) for PyTorch with
# PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (stream-ordered memory
# pools).
b=${PHOS_BUNDLE:-gpu-bundle}
src=${PHOS_SRCDIR:-$b/..}
. "$b/share/gpu-matrix.sh"
python3 -c 'import torch' 2>/dev/null || matrix_skip 12 "needs PyTorch"
matrix torch-async-alloc python3 "$src/tests/gpu/frameworks/torch_async_alloc.py"
