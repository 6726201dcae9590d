#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Under the tracer, CUDA programs run with correct results: the runtime
# linked statically and shared, cuBLAS SGEMM, and a PyTorch training loop
# whose losses are bit-identical to a run without the tracer. Each run
# must also have been seen by the tracer (its launches counted).
b=${PHOS_BUNDLE:-gpu-bundle}
src=${PHOS_SRCDIR:-$b/..}
lib=$b/lib/libphos.so
echo "1..4"
n=0

traced() { # NAME PROGRAM...: runs it under the tracer, checks its TAP and what the tracer saw
	local name=$1 out rc
	shift
	n=$((n + 1))
	out=$(LD_PRELOAD=$lib PHOS_DEBUG=1 PHOS_SOCKET=/nonexistent "$@" 2>&1)
	rc=$?
	printf '%s\n' "$out" | sed 's/^/# /'
	if printf '%s\n' "$out" | grep -q '^1\.\.0 # SKIP'; then
		echo "ok $n # skip $name: $(printf '%s\n' "$out" | grep -m1 SKIP | sed 's/.*SKIP //')"
	elif [ $rc = 0 ] && ! printf '%s\n' "$out" | grep -q '^not ok' &&
		printf '%s\n' "$out" | grep -Eq 'phos: .* [1-9][0-9]* launches'; then
		echo "ok $n - $name runs correctly under the tracer, which saw its launches"
	else
		echo "not ok $n - $name under the tracer (exit $rc)"
	fi
}

traced "a CUDA C program with static cudart" "$b/progs/cuda_runtime_program_runs"
traced "the same program with shared cudart" "$b/progs/cuda_runtime_program_runs_shared"
if [ -x "$b/progs/cublas_sgemm" ]; then
	traced "a cuBLAS SGEMM program" "$b/progs/cublas_sgemm"
else
	n=$((n + 1)); echo "ok $n # skip no cuBLAS program in the bundle"
fi

n=$((n + 1))
if ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	echo "ok $n # skip no PyTorch with CUDA"
	exit 0
fi
plain=$(python3 "$src/examples/pytorch/train_mlp.py" --steps 200 2>&1)
tr=$(LD_PRELOAD=$lib PHOS_DEBUG=1 PHOS_SOCKET=/nonexistent python3 "$src/examples/pytorch/train_mlp.py" --steps 200 2>&1)
seen=$(printf '%s\n' "$tr" | grep '^phos: ')
echo "# $seen"
echo "# last: $(printf '%s\n' "$plain" | tail -1) | traced: $(printf '%s\n' "$tr" | grep -v '^phos: ' | tail -1)"
if [ "$(printf '%s\n' "$plain" | grep -c '^step')" = 200 ] &&
	[ "$plain" = "$(printf '%s\n' "$tr" | grep -v '^phos: ')" ] && printf '%s\n' "$seen" | grep -Eq ' [1-9][0-9]* launches'; then
	echo "ok $n - a PyTorch training loop (MLP, AdamW, 200 steps) has bit-identical losses under the tracer"
else
	echo "not ok $n - the PyTorch losses differ under the tracer"
	diff <(printf '%s\n' "$plain") <(printf '%s\n' "$tr") | head -5 | sed 's/^/# /'
fi
