/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Pid namespaces, seen from phosfs's (the host's) side. `phos run` starts
 * each job as pid 1 of a namespace of its own (a small init, then the
 * job), so that CRIU restores it into a new namespace, whatever pids the
 * machine has taken, and beside its own original. A process has a host
 * pid, which phosfs, /proc, the driver and signals use, and a pid in its
 * own namespace, which it sees itself (getpid) and which the image keeps.
 * All of them read /proc, which must be the host's.
 */
#ifndef PHOS_PIDNS_H
#define PHOS_PIDNS_H

#include <stdbool.h>
#include <sys/types.h>

/* The pid that host pid `pid` has in its own (innermost) namespace: pid
 * itself for a process of the host's namespace. Returns it, or -ESRCH
 * (gone), -EIO (no NSpid line: a kernel before 4.1). */
pid_t pidns_inner(pid_t pid);

/* The host tid of pid's thread whose tid in pid's own namespace is
 * inner. Returns it, or -ESRCH. */
pid_t pidns_host_tid(pid_t pid, pid_t inner);

/* The first thread of pid for which match(tid, arg) holds (tid as the
 * host's /proc names it), or -ESRCH. */
pid_t pidns_task_where(pid_t pid, bool (*match)(pid_t tid, const void *arg), const void *arg);

/* Whether pid is the init (pid 1) of a namespace below the host's. */
bool pidns_is_init(pid_t pid);

/* The host pid of the process whose pid is `inner` in the namespace whose
 * init is host pid `init`. Returns it, or -ESRCH (none such), -EIO. */
pid_t pidns_find(pid_t init, pid_t inner);

#endif
