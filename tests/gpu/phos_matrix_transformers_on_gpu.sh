#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The framework matrix (tests/gpu/matrix.sh) for a Llama-architecture
# model from transformers decoding with its KV cache.
b=${PHOS_BUNDLE:-gpu-bundle}
src=${PHOS_SRCDIR:-$b/..}
. "$b/share/gpu-matrix.sh"
python3 -c 'import transformers' 2>/dev/null || matrix_skip 12 "needs transformers"
matrix transformers python3 "$src/tests/gpu/frameworks/transformers_decode.py"
