#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# A restored job goes into the cgroups of the process that asked for the
# restore, as a job it started would, and not into the cgroups its image
# names (CRIU would make those again: a dead job's). A scheduler that
# ends a step by killing its cgroup (Slurm's proctrack/cgroup, a
# container's runtime) then reaches the restored job too. A real phosfs,
# examples/counter under the tracer on simcuda, and cgroups made here in
# the cgroup v2 hierarchy and v1's memory one, each that is mounted:
#
#   1. phos run, started in cgroup A, runs its job in A;
#   2. TERM=checkpoint-kill checkpoints and ends it, and A is removed;
#      phos run --restore-from latest, started in cgroup B, restores the
#      job into B in every hierarchy, and A is not made again;
#   3. killing every process of B, as a scheduler ends its step, ends
#      the restored job;
#   4. phos restore, run from cgroup C, restores the image into C.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/phos_run_rig.bash
. "${PHOS_SRCDIR:-$here/../..}/tests/phos_run_rig.bash"
rig_require

# Where the hierarchies are mounted: cgroup v2's, and v1's with memory.
roots=()
while read -r point fstype opts; do
	case $fstype in
	cgroup2) [[ " ${roots[*]} " == *" $point "* ]] || roots+=("$point") ;;
	cgroup) [[ ,$opts, == *,memory,* ]] && roots+=("$point") ;;
	esac
done < <(awk '{for (i = 7; $i != "-"; i++); print $5, $(i + 1), $(i + 3)}' /proc/self/mountinfo)
tag=phos-test-$$
groups=()
for r in "${roots[@]}"; do
	mkdir "$r/$tag-probe" 2>/dev/null && rmdir "$r/$tag-probe" && groups+=("$r")
done
[ ${#groups[@]} -gt 0 ] || rig_skip "no cgroup hierarchy here in which cgroups can be made"
# Each cgroup made here is emptied and removed at the end.
empty_out() {
	local r p
	for r in "${groups[@]}"; do
		for _ in 1 2 3 4 5; do
			p=$(cat "$r/$tag-$1/cgroup.procs" 2>/dev/null)
			[ -z "$p" ] && break
			kill -9 $p 2>/dev/null
			sleep 0.1
		done
	done
}
cleanup() {
	local g r
	for g in A B C; do empty_out $g; done
	[ -z "${work:-}" ] || rig_cleanup
	for g in A B C; do for r in "${groups[@]}"; do rmdir "$r/$tag-$g" 2>/dev/null; done; done
}
for r in "${groups[@]}"; do mkdir "$r/$tag-A" "$r/$tag-B" "$r/$tag-C"; done
trap cleanup EXIT

rig_mount
trap cleanup EXIT # again: rig_mount sets its own

# in_cgroup G CMD...: runs CMD in cgroup G of every hierarchy tested.
in_cgroup() {
	local g=$1 r
	shift
	for r in "${groups[@]}"; do echo "$BASHPID" >"$r/$tag-$g/cgroup.procs" || return 1; done
	exec "$@"
}
# in_all PID G: PID is in cgroup G in every hierarchy tested.
in_all() {
	local n
	n=$(grep -c ":/\(.*/\)\?$tag-$2\$" "/proc/$1/cgroup" 2>/dev/null)
	[ "${n:-0}" = ${#groups[@]} ]
}
echo "# hierarchies: ${groups[*]}"

# 1. Started in A.
(in_cgroup A "$phos" run --name cg --on-signal TERM=checkpoint-kill -- "$counter" 8 >"$work/pid" 2>"$work/run.err") &
run=$!
pid=$(started "$work/pid")
out=$store/run/$pid.out
check 'in_all "$pid" A' "phos run started in cgroup A runs its job in A"

# 2. Checkpointed and ended; A removed; restored from B.
wait_line "$out" '^count 20$' 20
kill -TERM "$run"
wait_gone "$run" 60 || kill -9 "$run"
wait "$run"
gone=1
for r in "${groups[@]}"; do rmdir "$r/$tag-A" || gone=0; done
(in_cgroup B "$phos" run --name cg --restore-from latest -- "$counter" 8 >"$work/pid2" 2>"$work/run2.err") &
run=$!
new=$(started "$work/pid2" 20)
init=$(job_init "$new")
again=0
for r in "${groups[@]}"; do [ -e "$r/$tag-A" ] && again=1; done
check '[ $gone = 1 ] && alive "$new" && in_all "$new" B && { [ -z "$init" ] || in_all "$init" B; } && [ $again = 0 ]' \
	"restored from cgroup B, the job (pid $new) and its init are in B, and the removed A was not made again"
sed 's/^/# /' "$work/run2.err"
grep -E "^[0-9]+:[^:]*:/" "/proc/$new/cgroup" 2>/dev/null | grep "$tag" | sed 's/^/# restored: /'

# 3. B emptied, as a scheduler ends its step.
c=$(last_count "$out")
counted=0
wait_line "$out" "^count $((c + 10))\$" 20 && counted=1
empty_out B
check '[ $counted = 1 ] && wait_gone "$new" 5 && ! alive "$run"' \
	"the restored job counts on in B, and killing every process of B ends it, and phos run"

# 4. phos restore from C.
image=$(readlink -f "$store/jobs/cg/latest")
(in_cgroup C "$phos" restore "$image" >"$work/pid3" 2>"$work/restore.err") &
wait $!
third=$(tail -1 "$work/pid3")
note "$third"
check 'alive "$third" && in_all "$third" C' "phos restore, run from cgroup C, restores the image into C (pid $third)"
sed 's/^/# /' "$work/restore.err"
done_testing
