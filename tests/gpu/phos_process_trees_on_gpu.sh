#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Whole jobs on a real GPU, with a real phosfs mount and phos's CRIU plugin:
#   1. PyTorch training fed by DataLoader(num_workers=2), whose workers are
#      forked from the CUDA process, is checkpointed with `stop`, killed
#      with -9 and restored: every step line (batch checksum and loss) is
#      the uninterrupted run's;
#   2. the same job started through a shell script (`phos run -- train.sh`,
#      with pinned batches), checkpointed through the shell's pid, killed
#      and restored as a tree.
# `phos run` gives each job a pid namespace of its own, under phos-init:
# kill_job kills the whole namespace through that init, and the restore
# brings the tree back into a new one, the job under a new pid (the one
# `phos restore` prints), writing on to the original's output file.
# Needs root, FUSE, a GPU and PyTorch with CUDA.
b=${PHOS_BUNDLE:-gpu-bundle}
src=${PHOS_SRCDIR:-$b/..}
echo "1..2"
skip() { for i in 1 2; do echo "ok $i # skip $1"; done; exit 0; }
[ "$(id -u)" = 0 ] && [ -e /dev/fuse ] || skip "needs root and FUSE"
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
	skip "no PyTorch with CUDA"
. "$b/share/gpu-rig.sh"
rig_mount trees --criu-plugins "$b/criu-plugins" ||
	{ for i in 1 2; do echo "not ok $i - phosfs did not mount (bundle $b)"; done; exit 1; }
# JOB-NAME PLAIN-ARGS -- CMD...: run, checkpoint at step 30, kill, restore,
# compare with the uninterrupted run.
tree_case() {
	local n=$1 steps=100
	shift
	local plain
	plain=$(python3 "$src/examples/pytorch/train_loader.py" --steps $steps "$@" 2>&1)
	local pid opid
	pid=$(start "$work/pid$n" "${runner[@]}" --steps $steps --sleep 0.05 "$@")
	opid=$pid
	local out=$store/run/$pid.out err=$store/run/$pid.err ok=0
	if wait_line "$out" "^step 30 " 180; then
		sed -n '/^members/,/^job:/p' "$mnt/$pid/status" | sed 's/^/# /'
		"$phos" checkpoint "$pid" stop --wait | sed 's/^/# /'
		grep -E '^(stall ms|steps ms|error)' "$mnt/$pid/status" | sed 's/^/# /'
		kill_job "$pid"
		local rpid back=0
		rpid=$("$phos" restore "$mnt/$pid/checkpoints/latest")
		pid=$rpid
		follow "$pid" && back=1
		[ "$back" = 1 ] && sed -n '/^members/,/^job:/p' "$mnt/$pid/status" 2>/dev/null | sed 's/^/# restored: /'
		wait_line "$out" "^step $((steps - 1)) " 180
		local bad last
		bad=$(grep '^step' "$out" | sort -u | grep -vxF -f <(printf '%s\n' "$plain") | wc -l)
		last=$(grep -c '^step' "$out")
		echo "# restored $rpid (was $opid); $last step lines, $bad differ from the uninterrupted run"
		[ "$back" = 1 ] && [ "$bad" = 0 ] && grep -q "^step $((steps - 1)) " "$out" && ok=1
		grep -v '^step' "$out" "$err" 2>/dev/null | tail -5 | sed 's/^/# /'
	fi
	[ $ok = 1 ] || { grep -h -B2 -A8 'Error' "$store/$opid/.logs/"*.log "$store/.logs/"*.log 2>/dev/null | head -30 | sed 's/^/# criu: /'; }
	kill_job "$pid"
	return $((1 - ok))
}
runner=(python3 "$src/examples/pytorch/train_loader.py")
tree_case 1 --workers 2 &&
	echo "ok 1 - PyTorch with DataLoader workers is checkpointed, killed and restored, and goes on with the batches and losses of an uninterrupted run" ||
	echo "not ok 1 - the DataLoader job did not continue exactly"
runner=(sh "$src/examples/pytorch/train.sh")
tree_case 2 --workers 2 --pin-memory &&
	echo "ok 2 - the same job started by a shell script is checkpointed through the shell's pid and restored as a tree" ||
	echo "not ok 2 - the job started by a shell script did not continue exactly"
