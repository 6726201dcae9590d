/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The lazy variant of a restore (lazy.h; the sequence is restore_run's,
 * in restore.c): the process runs before its device memory is back.
 *
 *   2. plan: the application's own VMM objects (the tracer maps those
 *      where the application asks, so they come back first), objects
 *      that another member maps (a share: its tracer maps it again at
 *      unpark) and objects that were not mapped are filled before the
 *      tree runs; the rest are listed;
 *   5. tables: a LAZY table per process (common/cow.h);
 *   6. unpark: each tracer gets what is back and its table, and the job
 *      keeps its connection: the process runs;
 *   7. fill the rest, one object at a time, each on new memory of its
 *      (new) GPU: first any a call waits for (COW_URGENT), then in the
 *      image's object order, which is the tracer's guess at first use;
 *      each goes to its process on the connection as soon as it is full,
 *      and the tracer maps it at its old VA. Once every object is mapped
 *      (or was freed), END: the tracers drop their tables and go back to
 *      phosfs.
 *
 * A chunk that does not check, or a driver error, after 6 kills the tree
 * (restore.c): a process that would read memory that never comes back
 * must not run on.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lazy.h"

#define END_TIMEOUT_MS 30000 /* for the tracers to map the last objects */

/* Whether object k of in comes back before the process runs. */
static bool eager(const phosimg_info *in, uint32_t k)
{
	const phosimg_object *o = &in->objects[k];
	for (uint32_t i = 0; i < in->share_count; i++)
		if (in->shares[i].object == k)
			return true;
	return (o->flags & PHOSIMG_OBJ_APP_VMM) || !o->va;
}

/* Object k's state word, and its entry in its table. */
static _Atomic uint32_t *state_of(const lazy *l, int k, cow_header **t, cow_object **co)
{
	_Atomic uint32_t *st = engine_cow_chunk(&l->tables, k, 0, t);
	*co = &cow_objects(*t)[l->tables.first_of[k]];
	return st;
}

/* Object k needs nothing more: freed, or its process gone. */
static void skip(const lazy *l, int k)
{
	cow_header *t;
	cow_object *co;
	_Atomic uint32_t *st = state_of(l, k, &t, &co);
	atomic_store(st, LAZY_PRESENT);
	atomic_fetch_add(&t->off, 1);
	engine_cow_wake(t);
}

/* The next object to fill, taken (FILLING), and whether a call waits for
 * it; -1 when every object is taken. *cursor walks the image order. */
static int take(const lazy *l, int *cursor, bool *urgent)
{
	for (;;) {
		int k = -1;
		*urgent = false;
		for (int j = 0; j < l->objs.n && k < 0; j++) {
			cow_header *t;
			cow_object *co;
			uint32_t v = atomic_load(state_of(l, j, &t, &co));
			if ((v & COW_STATE_MASK) == LAZY_ABSENT && (v & COW_URGENT)) {
				k = j;
				*urgent = true;
			}
		}
		while (k < 0 && *cursor < l->objs.n) {
			cow_header *t;
			cow_object *co;
			if ((atomic_load(state_of(l, *cursor, &t, &co)) & COW_STATE_MASK) == LAZY_ABSENT)
				k = *cursor;
			else
				(*cursor)++;
		}
		if (k < 0)
			return -1;
		cow_header *t;
		cow_object *co;
		_Atomic uint32_t *st = state_of(l, k, &t, &co);
		uint32_t v = atomic_load(st);
		if ((v & COW_STATE_MASK) != LAZY_ABSENT ||
		    !atomic_compare_exchange_strong(st, &v, (v & ~COW_STATE_MASK) | LAZY_FILLING))
			continue;
		if (*urgent)
			atomic_fetch_sub(&t->urgent, 1);
		if (atomic_load(&co->freed) || l->conns[l->member[k]] < 0) {
			skip(l, k);
			continue;
		}
		return k;
	}
}

/* Reads what a tracer said meanwhile: an ERROR (it could not map an
 * object) fails the restore. A connection that ended is closed: its
 * process is gone. */
static int heard(lazy *l, uint32_t i, perr *er)
{
	int conn = l->conns[i];
	struct pollfd pf = { conn, POLLIN, 0 };
	while (conn >= 0 && poll(&pf, 1, 0) == 1) {
		char buf[512];
		wire_header h;
		int fds[WIRE_MAX_FDS], nfds = 0;
		int e = wire_recv(conn, &h, buf, sizeof(buf) - 1, fds, &nfds);
		for (int k = 0; k < nfds; k++)
			close(fds[k]);
		if (e && e != -EPROTO) {
			close(conn);
			l->conns[i] = -1;
			return 0;
		}
		if (!e && h.type == WIRE_ERROR) {
			buf[h.length < sizeof(buf) - 1 ? h.length : sizeof(buf) - 1] = 0;
			return pr_err(er, -EIO, "process %d: %s", (int)l->c->host[i], buf);
		}
	}
	return 0;
}

/* Fills every object and sends it to its process. */
static int fill_all(lazy *l, perr *er)
{
	engine_filler *f = NULL;
	int e = engine_filler_start(l->c->img, l->fill_threads, l->prog, &f, er);
	int cursor = 0;
	bool urgent;
	for (int k; !e && (k = take(l, &cursor, &urgent)) >= 0;) {
		if (atomic_load(&l->prog->cancel)) {
			e = pr_err(er, -ECANCELED, "cancelled");
			break;
		}
		const wire_object *o = &l->objs.objs[k];
		wire_object rec;
		int fd = -1;
		e = engine_fill_object(f, l->ids[k], engine_devmap_to(&l->c->map, o->device), &rec, &fd, er);
		if (e)
			break;
		cow_header *t;
		cow_object *co;
		_Atomic uint32_t *st = state_of(l, k, &t, &co);
		uint32_t v = atomic_load(st);
		while (!atomic_compare_exchange_weak(st, &v, (v & ~COW_STATE_MASK) | LAZY_SENT))
			;
		if (urgent)
			atomic_fetch_add(&l->prog->on_demand, 1);
		int i = l->member[k];
		int se = wire_send(l->conns[i], WIRE_OBJECTS, &rec, sizeof(rec), 1, &fd, 1);
		close(fd);
		if (se) {
			/* Its process ended: nothing of it needs to come back. */
			close(l->conns[i]);
			l->conns[i] = -1;
			skip(l, k);
		}
		e = heard(l, (uint32_t)i, er);
		engine_cow_stats(&l->tables, l->prog);
	}
	engine_filler_stop(f);
	return e;
}

/* Waits until every tracer has mapped what it was sent, then ends the
 * fill for each. */
static int finish(lazy *l, perr *er)
{
	int e = 0;
	for (int m = 0; !e && m < l->tables.n; m++) {
		engine_cow_member *tm = &l->tables.m[m];
		int i = engine_tree_member(l->c->m, l->c->n, tm->pid);
		uint64_t from = engine_now_ns();
		while (!e && i >= 0 && l->conns[i] >= 0 && atomic_load(&tm->t->off) < tm->t->nobjs) {
			if (engine_now_ns() - from > END_TIMEOUT_MS * 1000000ull)
				e = pr_err(er, -ETIMEDOUT,
					   "process %d did not map its device memory within %d s", (int)tm->pid,
					   END_TIMEOUT_MS / 1000);
			uint32_t seen = atomic_load(&tm->t->progress);
			atomic_fetch_add(&tm->t->waiters, 1);
			if (atomic_load(&tm->t->off) < tm->t->nobjs)
				cow_futex_wait(&tm->t->progress, seen, 20000000L);
			atomic_fetch_sub(&tm->t->waiters, 1);
			if (!e)
				e = heard(l, (uint32_t)i, er);
		}
		if (!e && i >= 0)
			e = heard(l, (uint32_t)i, er);
	}
	for (uint32_t i = 0; !e && i < l->c->n; i++)
		if (l->conns[i] >= 0)
			wire_send(l->conns[i], WIRE_END, NULL, 0, 0, NULL, 0);
	return e;
}

int lazy_plan(lazy *l, restore_ctx *c, const restore_args *a, perr *er)
{
	const phosimg_info *in = c->in;
	uint32_t n = in->object_count;
	*l = (lazy){ .c = c, .prog = a->prog, .fill_threads = a->fill_threads };
	l->now = calloc(n ? n : 1, sizeof(*l->now));
	l->ids = calloc(n ? n : 1, sizeof(*l->ids));
	l->member = calloc(n ? n : 1, sizeof(*l->member));
	l->conns = malloc(c->n * sizeof(*l->conns));
	if (!l->now || !l->ids || !l->member || !l->conns)
		return pr_err(er, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < c->n; i++)
		l->conns[i] = -1;
	/* The rest, in image order, with their ids and processes. */
	for (uint32_t k = 0; k < n; k++) {
		const phosimg_object *o = &in->objects[k];
		l->now[k] = eager(in, k);
		if (l->now[k])
			continue;
		int i = engine_tree_member(c->m, c->n, o->pid);
		if (i < 0)
			return pr_err(er, -EBADMSG, "object %u belongs to process %d, which the image lacks", k,
				      (int)o->pid);
		wire_object rec = { .key = o->va, .va = o->va, .size = o->size, .device = o->device };
		int none = -1;
		if (engine_parked_add(&l->objs, &rec, &none, o->pid, 1))
			return pr_err(er, -ENOMEM, "out of memory");
		l->ids[l->objs.n - 1] = k;
		l->member[l->objs.n - 1] = i;
	}
	return 0;
}

int lazy_tables(lazy *l, perr *er)
{
	return engine_cow_prepare(&l->tables, &l->objs, ENGINE_CHUNK, 0, COW_MODE_LAZY, er);
}

int lazy_later(const lazy *l, uint32_t i)
{
	return engine_parked_of(&l->objs, l->c->m[i].pid).n;
}

int lazy_unpark(lazy *l, uint32_t i, pid_t tid, const engine_tracer *tracer, const engine_parked *mine, perr *er)
{
	const engine_cow_member *tm = engine_cow_of(&l->tables, l->c->m[i].pid);
	pid_t host = l->c->host[i];
	return tm ? engine_unpark_lazy(host, tid, tracer, mine, tm, &l->conns[i], er)
		  : engine_unpark(host, tid, tracer, mine, NULL, er);
}

int lazy_fill(lazy *l, perr *er)
{
	engine_step(l->prog, STEP_LAZY);
	int e = fill_all(l, er);
	if (!e)
		e = finish(l, er);
	return e;
}

void lazy_end(lazy *l)
{
	if (!l->c)
		return;
	engine_cow_stats(&l->tables, l->prog);
	for (uint32_t i = 0; l->conns && i < l->c->n; i++)
		if (l->conns[i] >= 0)
			close(l->conns[i]);
	engine_cow_free(&l->tables);
	engine_parked_free(&l->objs);
	free(l->conns);
	free(l->ids);
	free(l->member);
	free(l->now);
	memset(l, 0, sizeof(*l));
}
