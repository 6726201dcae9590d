#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# A migration of a PyTorch training job between two phosfs on the GPU
# machine, each in a mount namespace of its own with its socket at the
# same path (as /run/phos is on two machines), sharing the GPU:
#   phos send PID recopy --kill -- nsenter … phos receive
# while examples/pytorch/train_mlp.py trains under `phos run --pid-ns`
# on node A.
#   1. phos send says B received the whole image and restored it, and A's
#      job ended;
#   2. the job runs on B, under B's phosfs;
#   3. its losses equal the uninterrupted run's, every one of its 400
#      steps once: none twice (A held it stopped from the final stall on),
#      none left out;
#   4. a stream cut midway leaves the job on A running, and B no half
#      image.
# Prints how long phos send took and the stall. Needs root, FUSE, a GPU,
# PyTorch, unshare and nsenter.
b=${PHOS_BUNDLE:-gpu-bundle}
src=${PHOS_SRCDIR:-$b/..}
echo "1..4"
skip() {
	for i in 1 2 3 4; do echo "ok $i # skip $1"; done
	exit 0
}
[ "$(id -u)" = 0 ] && [ -e /dev/fuse ] || skip "needs root and FUSE"
command -v unshare >/dev/null && command -v nsenter >/dev/null || skip "no unshare or nsenter"
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
	skip "no PyTorch with CUDA"
. "$b/share/gpu-rig.sh"
. "$b/share/nodes.bash"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
phos=$b/bin/phos
work=$(mktemp -d /dev/shm/phos-send.XXXXXX)
export PHOS_SOCKET=$work/run/sock PHOS_LIBPHOS=$b/lib/libphos.so

cleanup() {
	nodes_end
	for n in a b; do tail -n 10 "$work/$n.log" 2>/dev/null | sed "s/^/# phosfs $n: /"; done
	rm -rf "$work"
}
trap cleanup EXIT
if ! node a "$b/bin/phosfs" "$b/bin/criu" --criu-plugins "$b/criu-plugins" ||
	! node b "$b/bin/phosfs" "$b/bin/criu" --criu-plugins "$b/criu-plugins"; then
	for i in 1 2 3 4; do echo "not ok $i - a phosfs did not mount (bundle $b)"; done
	exit 1
fi
train=(python3 "$src/examples/pytorch/train_mlp.py" --steps 400 --sleep 0.05)
plain=$(timeout 600 python3 "$src/examples/pytorch/train_mlp.py" --steps 400 2>&1 | grep '^step')
receive=(nsenter -t "$(cat "$work/b.pid")" -m -- env PHOS_MOUNT="$work/b/mnt" "$phos" receive)

# Starts the job on A; its pid into $pid, its output $out.
start() {
	on a "$phos" run --pid-ns -- "${train[@]}" >"$work/pid.$1" 2>/dev/null &
	wait_line "$work/pid.$1" '^[0-9]+$' 60
	pid=$(head -1 "$work/pid.$1")
	echo "$pid" >>"$work/pids"
	out=$work/a/store/run/$pid.out
	wait_line "$out" '^step 60 ' 300
}

# 1-3. A migration.
start 1
t0=$(now)
on a "$phos" send "$pid" recopy --kill --name move -- "${receive[@]}" 2>"$work/send.err"
rc=$?
t1=$(now)
sed 's/^/# send: /' "$work/send.err"
back=$(sed -n 's/.*restored there as \([0-9]*\).*/\1/p' "$work/send.err")
echo "$back" >>"$work/pids"
stall=$(on a cat "$work/a/mnt/$pid/status" 2>/dev/null | awk -F': ' '/^stall ms/ {print $2}')
echo "# phos send took $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}') s; the job's stall on A: ${stall:-?} ms"
[ "$rc" = 0 ] && [ -n "$back" ] && grep -q "process $pid ended" "$work/send.err" && wait_gone "$pid" 10 &&
	echo "ok 1 - B received the whole image and restored it (as $back), then the job on A ended" ||
	echo "not ok 1 - the migration did not end as it should (phos send $rc)"
on b "$phos" ls | grep -q "^$back " && echo "ok 2 - the job runs on B, under B's phosfs" ||
	echo "not ok 2 - B's phosfs does not show the job"
wait_line "$out" '^step 399 ' 600
bad=$(grep '^step' "$out" | grep -vxF -f <(printf '%s\n' "$plain") | wc -l)
lines=$(grep -c '^step' "$out")
steps=$(grep '^step' "$out" | awk '{print $2}' | sort -un | wc -l)
[ "$bad" = 0 ] && [ "$steps" = 400 ] && [ "$lines" = 400 ] &&
	echo "ok 3 - its losses equal the uninterrupted run's, each of 400 steps once" ||
	echo "not ok 3 - $bad lines differ from the uninterrupted run's; $lines step lines, $steps steps of 400"

# 4. A stream cut midway.
start 2
on a "$phos" send "$pid" recopy --kill -- sh -c 'head -c 50000000 | "$@"' _ "${receive[@]}" 2>"$work/send2.err"
rc=$?
sed 's/^/# cut: /' "$work/send2.err"
n=$(grep -c '^step' "$out")
if [ "$rc" = 1 ] && alive "$pid" && wait_line "$out" "^step $((n + 10)) " 60 &&
	[ "$(ls -A "$work/b/store/received" | wc -l)" = 1 ]; then
	echo "ok 4 - a stream cut midway: the job on A trains on, and B keeps no half image"
else
	echo "not ok 4 - after a cut stream: phos send $rc, job on A $(alive "$pid" && echo alive || echo gone), B has $(ls -A "$work/b/store/received" | tr '\n' ' ')"
fi
