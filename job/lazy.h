/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The lazy variant's own steps of a restore (lazy.c; internal to job/).
 * restore_run calls them in this order; lazy_end always.
 */
#ifndef PHOS_JOB_LAZY_H
#define PHOS_JOB_LAZY_H

#include "restore-ctx.h"

/* The lazy part of a restore. */
typedef struct lazy {
	restore_ctx *c;
	engine_parked objs; /* records (no fds) of the objects still to come, in image order */
	uint32_t *ids;      /* their image object ids */
	int *member;        /* their process: an index into c->m */
	bool *now;          /* per image object: filled before the tree runs */
	engine_cow tables;  /* one LAZY table per process */
	int *conns;         /* per member: the tracer's connection, or -1 */
	engine_progress *prog;
	int fill_threads;
} lazy;

/* Step 2: decides which objects come back before the tree runs (l->now:
 * the application's own VMM objects, and those not mapped), and lists
 * the rest. Errors: -ENOMEM, -EBADMSG (an object of a process the image
 * lacks). */
int lazy_plan(lazy *l, restore_ctx *c, const restore_args *a, perr *er);

/* Step 5: a LAZY table for each process with objects still to come.
 * Errors: engine_cow_prepare's. */
int lazy_tables(lazy *l, perr *er);

/* How many of member i's objects come back later. */
int lazy_later(const lazy *l, uint32_t i);

/* Step 6 for member i: wakes its tracer (control thread tid) with mine,
 * what is back, and its LAZY table, and keeps its connection. Errors:
 * engine_unpark_lazy's. */
int lazy_unpark(lazy *l, uint32_t i, pid_t tid, const engine_tracer *tracer, const engine_parked *mine, perr *er);

/* Step 7: fills every object still to come and sends each to its
 * process, then waits until every tracer has mapped what it was sent and
 * ends the fill for each. Errors: -EIO (a tracer could not map an
 * object; the driver), -ECANCELED, -ETIMEDOUT, the fill's. */
int lazy_fill(lazy *l, perr *er);

/* Records the tables' counters and frees what l holds (nothing, if
 * lazy_plan never ran). */
void lazy_end(lazy *l);

#endif
