#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The framework matrix (tests/gpu/matrix.sh) for JAX/XLA training with
# optax, XLA's pool preallocated. Its fraction is JAX's default (0.75)
# where the store can hold the matrix's three images of it, else as much
# as it can (PHOS_JAX_FRACTION sets it).
b=${PHOS_BUNDLE:-gpu-bundle}
src=${PHOS_SRCDIR:-$b/..}
. "$b/share/gpu-matrix.sh"
python3 -c 'import jax, optax' 2>/dev/null || matrix_skip 12 "needs JAX and optax"
# The store is under /dev/shm (gpu-rig.sh): three images, and room to spare.
gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
shm_mib=$(df -m --output=avail /dev/shm | tail -1)
frac=${PHOS_JAX_FRACTION:-$(awk -v g="${gpu_mib:-1}" -v s="$shm_mib" 'BEGIN {f = s * 0.8 / 3 / g; if (f > 0.75) f = 0.75; printf "%.2f", f}')}
echo "# XLA_PYTHON_CLIENT_MEM_FRACTION=$frac (GPU $gpu_mib MiB, /dev/shm $shm_mib MiB free)"
export XLA_PYTHON_CLIENT_MEM_FRACTION=$frac
matrix jax python3 "$src/tests/gpu/frameworks/jax_train.py"
