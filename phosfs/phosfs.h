/*
 * phosfs internals: the registry of traced processes and the file system
 * that shows them. Functions return 0 or a negative errno.
 */
#ifndef PHOSFS_H
#define PHOSFS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/state.h"
#include "../common/wire.h"

#define PHOS_VERSION "0.1"

/* A traced process, as registered. Owned by the registry; callers get
 * references through registry_get and give them back with registry_put. */
typedef struct proc {
	pid_t pid;
	uid_t uid; /* the process owner, from /proc */
	wire_hello hello;
	pthread_mutex_t lock; /* guards conn: one request at a time */
	int conn;
	state_header *table; /* mapped, or NULL */
	int refs;            /* guarded by the registry's lock */
	_Atomic bool gone;   /* the connection ended */
	struct proc *next;
} proc;

/* registry.c: listens on path for tracers. Starts a thread. */
int registry_start(const char *path);
void registry_stop(void);
/* A registered process by pid, or NULL; registry_put gives it back. */
proc *registry_get(pid_t pid);
void registry_put(proc *p);
/* The pids registered now; *out is malloc'd. */
int registry_pids(pid_t **out, size_t *n);

/* Requests to a process; the replies are malloc'd. */
int proc_list(proc *p, wire_buffer **out, size_t *n);
/* Raw KERNELS payloads, concatenated: wire_kernel records with names. */
int proc_kernels(proc *p, uint8_t **out, size_t *len, uint32_t *count);

#endif
