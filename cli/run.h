/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * phos run: starting a job under the tracer (run.c), for the phos CLI.
 */
#ifndef PHOS_RUN_H
#define PHOS_RUN_H

#include <signal.h>
#include <stdbool.h>
#include <sys/types.h>

typedef struct run_opts {
	const char *store;  /* phosfs's store: output goes to STORE/run/PID.out and .err */
	const char *libphos; /* the tracer to preload */
	const char *mount;   /* phosfs's mount point, which a job of pid_ns does not see */
	bool pid_ns;         /* a pid namespace of its own (see run_job) */
	const sigset_t *mask; /* the signal mask the job starts with (NULL: phos run's) */
} run_opts;

/* Starts argv[0] (searched in PATH) under the tracer, with no terminal,
 * as a job. By default the job is the root, with the pid the host sees.
 * With pid_ns, it is pid 2 of a pid namespace of its own, under a small
 * init (pid 1, the job's root, which reaps orphans, passes signals on and
 * ends with the job, taking the namespace with it), so that a restore can
 * give it a new namespace beside any other process; where a namespace is
 * not permitted (not root), the job itself is the root. The init also
 * gives it a mount namespace with a /proc of its pid namespace, which the
 * CUDA driver needs (it opens /proc/<getpid()>/...), and without phosfs's
 * mount point (o->mount).
 * *job is the job's pid, as this namespace sees it; *root the root's
 * (the init, or the job). why (when not NULL) says why the job has no
 * namespace of its own, or is "". Returns 0, or -errno with msg saying
 * what failed (a file it could not open, a command it could not run, a
 * mount namespace it could not have). */
int run_job(char *const argv[], const run_opts *o, pid_t *job, pid_t *root, char *why, size_t whylen, char *msg,
	    size_t msglen);

/* The signals the init passes on to its job: HUP, INT, QUIT, TERM, USR1,
 * USR2, CONT, WINCH, ALRM, XCPU and PWR. */
void run_passed_signals(sigset_t *set);

/* Where the init of root's pid namespace (root: its pid; 0: this
 * process's) writes how its job ended, its own exit status as a decimal
 * line: STORE/run/ns-INODE.status, INODE its pid namespace's, which a
 * restore changes with the namespace. Errors: -ENOENT (root is gone),
 * -EPROTO. */
int run_status_path(const char *store, pid_t root, char *path, size_t len);

/* The init's own entry (argv[0] "phos-init"): `phos-init FD PROCFD STORE
 * LIBPHOS -- CMD...`, as run_job execs it (PROCFD: the host's /proc, for
 * the job's host pid). Returns the exit status: the job's. */
int run_init(int argc, char **argv);

#endif
