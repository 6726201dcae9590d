#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# examples/slurm/train.sbatch on a real Slurm of one node, started here
# (munged, slurmctld and slurmd, with a slurm.conf of its own: process
# tracking by the process tree, no cgroups, so that it runs without
# systemd), with a real phosfs, and examples/counter on simcuda as the
# training job:
#
#   1. the batch job runs the counter under phos run;
#   2. Slurm signals the batch script alone (scancel --batch
#      --signal=USR1, as --signal=B:USR1@… does before the time limit):
#      phos run checkpoints the job and ends it, the image is linked as
#      STORE/jobs/JOBID/latest, and the script requeues the job;
#   3. the requeued job (the same script and job id) comes back from its
#      checkpoint: the counter goes on from the count it had, with its
#      device memory intact, not from zero;
#   4. scancel ends it, through phos run, although the restored job is not
#      in the batch step's process tree.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/phos_run_rig.bash
. "${PHOS_SRCDIR:-$here/../..}/tests/phos_run_rig.bash"
rig_require
for c in munged slurmctld slurmd sbatch scontrol squeue scancel sinfo; do
	command -v "$c" >/dev/null || PATH=$PATH:/usr/sbin command -v "$c" >/dev/null ||
		rig_skip "no $c (Debian's slurmctld, slurmd, slurm-client and munge: make deps)"
done
export PATH=$PATH:/usr/sbin
script=$src/examples/slurm/train.sbatch
[ -r "$script" ] || rig_skip "no $script (set PHOS_SRCDIR)"
rig_mount

# ---- a Slurm of one node -------------------------------------------------
slurm=$work/slurm
mkdir -p "$slurm/state" "$slurm/spool"
mkdir -m 0711 "$slurm/munge"
head -c 1024 /dev/urandom >"$slurm/munge/key"
chmod 0400 "$slurm/munge/key"
# -f: munged would refuse a socket under a folder that not all may enter.
munged -F -f --key-file="$slurm/munge/key" --socket="$slurm/munge/sock" --pid-file="$slurm/munge/pid" \
	--log-file="$slurm/munge/log" --seed-file="$slurm/munge/seed" 2>"$slurm/munge/err" &
munge_pid=$!
# Two free ports: nothing answers on them.
free_port() {
	local p
	for p in $(shuf -i 20000-60000 -n 50); do
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
	done
}
ctl_port=$(free_port)
d_port=$(free_port)
node=$(hostname -s)
cat >"$slurm/slurm.conf" <<EOF
ClusterName=phostest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctl_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$slurm/munge/sock
StateSaveLocation=$slurm/state
SlurmdSpoolDir=$slurm/spool
SlurmctldPidFile=$slurm/slurmctld.pid
SlurmdPidFile=$slurm/slurmd.pid
SlurmctldLogFile=$slurm/slurmctld.log
SlurmdLogFile=$slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/linear
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
KillWait=10
MessageTimeout=5
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$slurm/slurm.conf
for _ in $(seq 100); do [ -S "$slurm/munge/sock" ] && break; sleep 0.05; done
if [ ! -S "$slurm/munge/sock" ]; then
	echo "Bail out! munged did not start (its log follows)"
	sed 's/^/# /' "$slurm/munge/err"
	exit 1
fi
slurmctld -D -i -f "$SLURM_CONF" 2>"$slurm/slurmctld.err" &
ctl_pid=$!
slurmd -D -N "$node" -f "$SLURM_CONF" 2>"$slurm/slurmd.err" &
d_pid=$!
slurm_cleanup() {
	[ -n "${id:-}" ] && timeout 10 scancel "$id" 2>/dev/null && sleep 0.5
	kill "$d_pid" "$ctl_pid" 2>/dev/null
	wait "$d_pid" "$ctl_pid" 2>/dev/null
	kill "$munge_pid" 2>/dev/null
	wait "$munge_pid" 2>/dev/null
	if [ "$rig_failed" != 0 ]; then
		for f in slurmctld.log slurmd.log; do tail -n 15 "$slurm/$f" | sed "s/^/# $f: /" >&2; done
		[ -f "$work/job.out" ] && sed 's/^/# job: /' "$work/job.out" >&2
	fi
	rig_cleanup
}
trap slurm_cleanup EXIT
up=
for _ in $(seq 150); do
	[ "$(timeout 5 sinfo -h -o %t 2>/dev/null)" = idle ] && up=1 && break
	sleep 0.2
done
check '[ -n "$up" ]' "a Slurm of one node runs here (slurmctld, slurmd, munged)"
[ -n "$up" ] || done_testing

# ---- 1. the job runs ---------------------------------------------------------
export PHOS=$phos
id=$(timeout 30 sbatch --parsable -o "$work/job.out" -D "$work" "$script" "$counter" 8)
wait_line "$work/job.out" '^[0-9]+$' 30
pid=$(grep -m1 -E '^[0-9]+$' "$work/job.out")
note "$pid"
out=$store/run/$pid.out
check 'wait_line "$out" "^count 20\$" 30' "sbatch train.sbatch runs the counter under phos run (job $id, process ${pid:-none})"

# ---- 2. the signal: checkpoint, end, requeue --------------------------------------
scancel --batch --signal=USR1 "$id"
check 'wait_line "$work/job.out" "requeueing job $id" 30 && [ -f "$store/jobs/$id/latest/manifest.phos" ] && ! alive "$pid"' \
	"USR1 to the batch script: phos run checkpoints the job and ends it, STORE/jobs/$id/latest names the image, and the job is requeued"
c=$(last_count "$out")

# ---- 3. the requeued job comes back -----------------------------------------------
# A requeued job waits 2 minutes before it may start again: not here. Its
# new credential must be of a later second than the requeue revoked the
# old one in (slurmd refuses one of the same second: "Job credential
# revoked"), so it starts 2 s on.
for _ in $(seq 100); do
	[ "$(squeue -h -j "$id" -o %T 2>/dev/null)" = PENDING ] && scontrol update JobId="$id" StartTime=now+2 2>/dev/null && break
	sleep 0.2
done
wait_line "$work/job.out" "^phos: process [0-9]+ restored from" 60
new=$(grep -E '^[0-9]+$' "$work/job.out" | sed -n 2p)
note "$new"
check '[ -n "$new" ] && [ "$new" != "$pid" ] && alive "$new" && grep -q "restored from $store/$pid/" "$work/job.out"' \
	"the requeued job restores the checkpoint (process ${new:-none})"
check 'wait_line "$out" "^count $((c + 10))\$" 30 && [ "$(grep -c "MiB of device memory ready" "$out")" = 1 ]' \
	"its counter goes on from $c, where the checkpoint left it, not from zero"
kill -USR1 "$new"
check 'wait_line "$out" "^verify ok count" 20' "with every byte of its device memory intact"
check '[ "$(scontrol show job "$id" | grep -o "Restarts=[0-9]*")" = Restarts=1 ]' "Slurm counts one restart"

# ---- 4. scancel ends it ------------------------------------------------------------
scancel "$id"
check 'wait_gone "$new" 30' "scancel ends the restored job, through phos run"
done_testing
