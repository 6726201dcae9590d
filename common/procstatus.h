/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * One field of /proc/PID/status ("Key:\tvalue"), for the few things only
 * that file says: a process's pids in its namespaces (NSpid), its parent
 * (PPid), its tracer (TracerPid), its capabilities (CapEff).
 */
#ifndef PHOS_PROCSTATUS_H
#define PHOS_PROCSTATUS_H

#include <stddef.h>
#include <sys/types.h>

/* The value of field key of pid's status, without the blanks around it,
 * into out (len bytes, cut to fit). Returns 0, -ESRCH (no such process;
 * a pid that is not positive, as a peer's unseen from here, names none),
 * or -ENOENT (no such field). */
int proc_status_field(pid_t pid, const char *key, char *out, size_t len);

/* The same, of this process (/proc/self/status). */
int proc_self_status_field(const char *key, char *out, size_t len);

#endif
