/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Parking (park.c): the conversation with a traced process, which hands
 * the job the fds of its device memory and later gets them back; and the
 * parked memory of a tree, as the other parts of the engine take it.
 */
#ifndef PHOS_ENGINE_PARK_H
#define PHOS_ENGINE_PARK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/wire.h"
#include "../image-format/phosimg.h"
#include "error.h"

/* A process's CoW or LAZY table (cow.h). */
typedef struct engine_cow_member engine_cow_member;

/* The parked memory of the processes of a tree: records, the fds that
 * hold them, and the process each belongs to. One process's objects are
 * consecutive. */
typedef struct engine_parked {
	wire_object *objs;
	int *fds;
	pid_t *pids;
	int n, cap;
	/* engine_park: the process's GPUs as it sees them (WIRE_DEVICES):
	 * ndev UUIDs, by ordinal; 0 when its tracer did not say. */
	uint32_t ndev;
	uint8_t dev_uuid[PHOSIMG_DEVICES_MAX][16];
} engine_parked;

/* Closes the fds and frees the arrays. */
void engine_parked_free(engine_parked *p);

/* Frees the arrays, not the fds (which are another's). */
void engine_parked_drop(engine_parked *p);

/* Appends n objects of process pid; the fds are then p's. Errors:
 * -ENOMEM (nothing appended, the fds still the caller's). */
int engine_parked_add(engine_parked *p, const wire_object *objs, const int *fds, pid_t pid, int n);

/* Moves every object of from to the end of to (from is left empty).
 * Errors: -ENOMEM (nothing moved). */
int engine_parked_move(engine_parked *to, engine_parked *from);

/* The run of pid's objects in all, as a view into its arrays (not to be
 * freed); empty if pid has none. */
engine_parked engine_parked_of(const engine_parked *all, pid_t pid);

/* A traced process of a tree: its connection, on which the engine sends
 * PARK, and the thread WIRE_WAKE_SIGNAL goes to. */
typedef struct engine_traced {
	pid_t pid;
	int conn;
	pid_t control_tid;
	uint64_t devices; /* bit d: it holds device memory on GPU d */
	uint32_t buffers; /* its live allocations, as many as its objects or more */
	bool keep;        /* stop-only: it keeps its memory for the driver's checkpoint */
} engine_traced;

/* How the engine meets a woken tracer again, one process at a time. */
typedef struct engine_tracer {
	/* Called before the wake signal is sent: the next HELLO RESUME of pid
	 * must be held for await. */
	int (*expect)(void *arg, pid_t pid);
	/* Waits up to timeout_ms for that connection; *conn is valid until
	 * adopt or drop is called. Returns 0, -ETIMEDOUT. */
	int (*await)(void *arg, pid_t pid, int timeout_ms, int *conn);
	/* The process runs again: its connection serves requests as before. */
	void (*adopt)(void *arg, pid_t pid);
	/* Gives up waiting (after an error): nothing is held any more. */
	void (*drop)(void *arg, pid_t pid);
	void *arg;
} engine_tracer;

/* How long past its deadline a tracer's first answer may take to come;
 * and how long past it a parked tracer waits for HELD. */
#define ENGINE_ANSWER_GRACE_MS 2000
#define ENGINE_HELD_SLACK_MS 30000

/* Sends PARK on conn, with timeout_ms for the quiesce, and collects every
 * object of process pid until PARKED, into *out (emptied first); with
 * keep (a stop-only process in a stop checkpoint), none: it keeps its
 * memory mapped, for the driver's checkpoint. The
 * process still holds its memory: engine_hold lets it go, and
 * engine_decline (or closing conn) keeps it running. Errors: -EIO (the
 * tracer refused or could not quiesce in time: er says why),
 * -ETIMEDOUT (no answer by timeout_ms and ENGINE_ANSWER_GRACE_MS),
 * -EPROTO, wire errors. */
int engine_park(pid_t pid, int conn, int timeout_ms, bool keep, engine_parked *out, perr *er);

/* Tells a process that answered PARKED that the engine holds every fd
 * (*sent: it was told), and waits until it has released its memory and
 * closed its end. Errors: -ETIMEDOUT, -EPROTO and wire errors (er says
 * which process). */
int engine_hold(pid_t pid, int conn, bool *sent, perr *er);

/* Tells a process that answered PARKED that the checkpoint does not go
 * on (why, for its log): it keeps its memory and runs on. */
void engine_decline(int conn, const char *why);

/* Sends ask (WIRE_PARK, WIRE_TRACK) on conn, with timeout_ms for the
 * quiesce and flags (WIRE_PARK_*), and collects every object of process pid, and the GPUs it
 * sees (WIRE_DEVICES), until done (WIRE_PARKED, WIRE_TRACKED), into *out
 * (emptied first). what names the request in er. Errors: as
 * engine_park. */
int engine_collect(pid_t pid, int conn, uint16_t ask, uint16_t done, const char *what, int timeout_ms,
		   uint32_t flags, engine_parked *out, perr *er);

/* Receives one message from pid's tracer within the park timeout, into
 * h, buf (cap bytes) and fds (*nfds). Errors: -EIO when it is ERROR (er
 * has the tracer's words, "process P did not WHAT: …"; its fds are
 * closed), -ETIMEDOUT and wire errors. */
int engine_recv(pid_t pid, int conn, const char *what, wire_header *h, void *buf, size_t cap, int *fds, int *nfds,
		perr *er);
/* The same, waiting ms for the message. */
int engine_recv_within(pid_t pid, int conn, const char *what, int ms, wire_header *h, void *buf, size_t cap,
		       int *fds, int *nfds, perr *er);

/* Wakes the parked process pid through its control thread tid, waits for
 * it to connect again, gives it the objects (the fds are sent, not
 * closed), and with cow (or NULL) its CoW table and pool, and waits until
 * it runs. Errors: -ETIMEDOUT, -EPROTO, -EIO (er says why). */
int engine_unpark(pid_t pid, pid_t tid, const engine_tracer *t, const engine_parked *objs,
		  const engine_cow_member *cow, perr *er);

/* The same for a lazy restore: the objects sent before the process runs
 * are objs, the rest are listed in the LAZY table lazy, and the
 * connection stays open for them: *conn is the caller's to send the
 * objects on as they are filled, then WIRE_END, and to close. Errors: as
 * engine_unpark. */
int engine_unpark_lazy(pid_t pid, pid_t tid, const engine_tracer *t, const engine_parked *objs,
		       const engine_cow_member *lazy, int *conn, perr *er);

/* The tid of pid's tracer control thread ("phos-control"), or -ESRCH. */
pid_t engine_find_control_thread(pid_t pid);

#endif
