#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The framework matrix (tests/gpu/matrix.sh) for PyTorch fed by a
# DataLoader with two workers and pin_memory=True.
b=${PHOS_BUNDLE:-gpu-bundle}
src=${PHOS_SRCDIR:-$b/..}
. "$b/share/gpu-matrix.sh"
python3 -c 'import torch' 2>/dev/null || matrix_skip 12 "needs PyTorch"
matrix dataloader-pinned python3 "$src/examples/pytorch/train_loader.py" --workers 2 --pin-memory
