/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The first part of a recopy checkpoint (doc/ARCHITECTURE.md, "The
 * checkpoint protocols", recopy): every traced process is quiesced,
 * hands over its device memory while keeping it mapped, takes a TRACK
 * table (common/cow.h) and runs on at once. Every call that may write a chunk from then on marks it dirty.
 * The job meanwhile copies each chunk that is not dirty into the staging
 * pool. The checkpoint (run_recopy, job/checkpoint.c) then takes the
 * final stall (t2), in which only the chunks dirty by then, and objects that were not there at tracking, are
 * copied from the GPU; the rest is written into the image from staging.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "mapping.h"
#include "recopy.h"
#include "tree.h"

#define COPIERS 4
/* Staging left free for the final stall's copy: an eighth (what phosfs
 * sizes staging above the bytes), so that it runs at the bus's speed. */
#define RESERVE_MIN 8

/* TRACK: the objects of pid, still mapped in the process. */
static int collect(pid_t pid, int conn, int timeout_ms, engine_parked *out, perr *er)
{
	return engine_collect(pid, conn, WIRE_TRACK, WIRE_TRACKED, "track", timeout_ms, 0, out, er);
}

/* Sends pid its table; the process runs on, tracking. */
static int start(pid_t pid, int conn, const engine_cow_member *m, perr *er)
{
	wire_cow wc = { .table_bytes = m->bytes };
	int self = (int)syscall(SYS_pidfd_open, getpid(), 0);
	if (self < 0)
		return pr_perror(er, -errno, "pidfd_open");
	int fds[2] = { m->fd, self };
	int e = wire_send(conn, WIRE_COW, &wc, sizeof(wc), 1, fds, 2);
	close(self);
	if (e)
		return pr_err(er, e, "cannot send process %d its table: %s", (int)pid, strerror(-e));
	char buf[512];
	wire_header h;
	int rfds[WIRE_MAX_FDS], nfds = 0;
	e = engine_recv(pid, conn, "take its table", &h, buf, sizeof(buf), rfds, &nfds, er);
	for (int i = 0; i < nfds; i++)
		close(rfds[i]);
	if (!e && h.type != WIRE_UNPARKED)
		e = pr_err(er, -EPROTO, "the tracer answered the TRACK table with message %u", h.type);
	return e;
}

/* After a failed TRACK of another process: lets one that handed its
 * objects over run on without a table. */
static void release(pid_t pid, int conn)
{
	char buf[512];
	perr er;
	wire_header h;
	int fds[WIRE_MAX_FDS], nfds = 0;
	if (wire_send(conn, WIRE_END, NULL, 0, 0, NULL, 0) == 0)
		engine_recv(pid, conn, "end tracking", &h, buf, sizeof(buf), fds, &nfds, &er);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
}

/* Moves one process's objects and table (of its own engine_cow) to the
 * end of r's. Errors: -ENOMEM (nothing moved). */
static int adopt(engine_recopy *r, engine_parked *mine, engine_cow *c)
{
	int at = r->objs.n, n = mine->n;
	engine_cow *t = &r->tables;
	engine_cow_member *m = realloc(t->m, (size_t)(t->n + 1) * sizeof(*m));
	if (m)
		t->m = m;
	int *to = m ? realloc(t->table_of, (size_t)(at + n) * sizeof(*to)) : NULL;
	if (to)
		t->table_of = to;
	uint64_t *fo = to ? realloc(t->first_of, (size_t)(at + n) * sizeof(*fo)) : NULL;
	if (fo)
		t->first_of = fo;
	if (!fo || engine_parked_move(&r->objs, mine))
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		t->table_of[at + i] = t->n;
		t->first_of[at + i] = c->first_of[i];
	}
	t->m[t->n++] = c->m[0];
	t->chunk = c->chunk;
	free(c->m);
	free(c->table_of);
	free(c->first_of);
	memset(c, 0, sizeof(*c));
	return 0;
}

/* Tracks one process: it is held (gate closed) only between its own
 * TRACK and its table. */
static int track_one(engine_recopy *r, const engine_traced *tr, uint32_t chunk, int timeout_ms, perr *er)
{
	engine_parked mine;
	int e = collect(tr->pid, tr->conn, timeout_ms, &mine, er);
	if (e)
		return e;
	engine_cow c = { 0 };
	if (mine.n)
		e = engine_cow_prepare(&c, &mine, chunk, 0, COW_MODE_TRACK, er);
	if (!e && mine.n)
		e = start(tr->pid, tr->conn, &c.m[0], er);
	else
		release(tr->pid, tr->conn); /* nothing to track, or no table for it */
	if (!e && mine.n && adopt(r, &mine, &c))
		e = pr_err(er, -ENOMEM, "out of memory");
	engine_cow_free(&c); /* ends a table that was not adopted */
	engine_parked_free(&mine);
	return e;
}

int engine_recopy_track(engine_recopy *r, const engine_traced *traced, int ntraced, uint32_t chunk, int timeout_ms,
			perr *er)
{
	memset(r, 0, sizeof(*r));
	r->chunk = chunk;
	r->tables.chunk = chunk;
	int e = 0;
	for (int t = 0; t < ntraced && !e; t++)
		if (engine_alive(traced[t].pid)) /* one that left the tree is not waited for */
			e = track_one(r, &traced[t], chunk, timeout_ms, er);
	return e;
}

typedef struct precopy {
	engine_recopy *r;
	mapping *maps;
	uint8_t *staging;
	uint32_t nslots;
	_Atomic uint64_t cursor;
	_Atomic uint32_t next_slot;
	_Atomic int error;
	engine_progress *prog;
	perr err;
	pthread_mutex_t lock; /* guards err */
} precopy;

static void *precopier(void *arg)
{
	precopy *p = arg;
	engine_recopy *r = p->r;
	mapping_streams ss = { .dev = -1 };
	perr er = { 0 };
	int e = 0;
	for (;;) {
		uint64_t g = atomic_fetch_add(&p->cursor, 1);
		if (g >= r->nchunks || atomic_load(&p->error) || (p->prog && atomic_load(&p->prog->cancel)))
			break;
		int k = mapping_owner(r->first, r->objs.n, g);
		cow_header *t;
		_Atomic uint32_t *st = engine_cow_chunk(&r->tables, k, g - r->first[k], &t);
		uint32_t v = atomic_load(st);
		if ((v & COW_DIRTY) || (v & COW_STATE_MASK) != COW_PENDING || atomic_load(&t->all_dirty) ||
		    (r->co[k] && atomic_load(&r->co[k]->freed)) || !atomic_compare_exchange_strong(st, &v, COW_COPYING))
			continue; /* written (or freed) already: the final stall decides */
		uint32_t slot = atomic_fetch_add(&p->next_slot, 1);
		if (slot >= p->nslots) {
			/* Staging is full: the rest waits for the final stall. */
			atomic_fetch_and(st, ~(uint32_t)COW_STATE_MASK); /* COPYING -> PENDING, marks kept */
			break;
		}
		const mapping *m = &p->maps[k];
		uint64_t off = (g - r->first[k]) * r->chunk;
		uint32_t len = m->len - off < r->chunk ? (uint32_t)(m->len - off) : r->chunk;
		e = mapping_copy_out(&ss, m->device, p->staging + (uint64_t)slot * r->chunk, m->va + off, len, &er);
		if (e)
			break;
		r->slot[g] = slot;
		/* Written while on the bus: COPYING|DIRTY stays, and counts as dirty. */
		uint32_t was = COW_COPYING;
		atomic_compare_exchange_strong(st, &was, COW_OFF);
		atomic_fetch_add(&r->copied, len);
	}
	mapping_streams_free(&ss);
	if (e) {
		int none = 0;
		pthread_mutex_lock(&p->lock);
		if (atomic_compare_exchange_strong(&p->error, &none, e)) {
			pr_copy(&p->err, &er);
			p->err.code = e;
		}
		pthread_mutex_unlock(&p->lock);
	}
	return NULL;
}

/* Orders objects by (pid, VA), for engine_recopy_find. */
static int by_pid_va(const void *a, const void *b, void *arg)
{
	const engine_parked *o = arg;
	int x = *(const int *)a, y = *(const int *)b;
	if (o->pids[x] != o->pids[y])
		return o->pids[x] < o->pids[y] ? -1 : 1;
	return o->objs[x].va < o->objs[y].va ? -1 : o->objs[x].va > o->objs[y].va;
}

int engine_recopy_copy(engine_recopy *r, void *staging, uint64_t staging_bytes, engine_progress *prog, perr *er)
{
	uint64_t t0 = engine_now_ns();
	int n = r->objs.n;
	r->first = calloc((size_t)n + 1, sizeof(*r->first));
	mapping *maps = calloc(n ? (size_t)n : 1, sizeof(*maps));
	if (!r->first || !maps) {
		free(maps);
		return pr_err(er, -ENOMEM, "out of memory");
	}
	int e = 0, mapped = 0;
	uint64_t bytes = 0;
	for (int k = 0; k < n; k++) {
		r->first[k + 1] = r->first[k] + cow_chunks_of(r->objs.objs[k].size, r->chunk);
		bytes += r->objs.objs[k].size;
	}
	if (prog)
		atomic_store(&prog->total, bytes); /* the final stall sets it again */
	r->nchunks = r->first[n];
	r->slot = malloc((r->nchunks ? r->nchunks : 1) * sizeof(*r->slot));
	if (!r->slot)
		e = pr_err(er, -ENOMEM, "out of memory");
	for (uint64_t g = 0; !e && g < r->nchunks; g++)
		r->slot[g] = UINT32_MAX;
	/* The objects by (pid, VA): the final stall looks each one up. */
	r->order = malloc((n ? (size_t)n : 1) * sizeof(*r->order));
	if (!e && !r->order)
		e = pr_err(er, -ENOMEM, "out of memory");
	for (int k = 0; !e && k < n; k++)
		r->order[k] = k;
	if (!e)
		qsort_r(r->order, (size_t)n, sizeof(*r->order), by_pid_va, &r->objs);
	/* Each object's entry in its table, where the tracer marks it freed. */
	r->co = calloc(n ? (size_t)n : 1, sizeof(*r->co));
	if (!e && !r->co)
		e = pr_err(er, -ENOMEM, "out of memory");
	for (int k = 0; k < n && !e; k++) {
		cow_header *t;
		engine_cow_chunk(&r->tables, k, 0, &t);
		for (uint32_t i = 0; i < t->nobjs; i++)
			if (cow_objects(t)[i].first == r->tables.first_of[k])
				r->co[k] = &cow_objects(t)[i];
	}
	/* The mappings hold the memory now: without the fds, an object the
	 * process frees goes once this copy lets go of it. */
	for (int k = 0; k < n && !e; k++, mapped++) {
		e = mapping_import(&maps[k], r->objs.fds[k], r->objs.objs[k].size, (int)r->objs.objs[k].device, er);
		close(r->objs.fds[k]);
		r->objs.fds[k] = -1;
	}
	uint64_t nslots = staging_bytes / r->chunk, reserve = nslots / 8 > RESERVE_MIN ? nslots / 8 : RESERVE_MIN;
	precopy p = { .r = r, .maps = maps, .staging = staging, .prog = prog,
		      .nslots = nslots > reserve ? (uint32_t)(nslots - reserve) : 0 };
	pthread_mutex_init(&p.lock, NULL);
	pthread_t th[COPIERS];
	int started = 0;
	for (; !e && p.nslots && started < COPIERS; started++)
		if (pthread_create(&th[started], NULL, precopier, &p))
			break;
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	if (!e && atomic_load(&p.error))
		e = pr_copy(er, &p.err);
	if (!e && prog && atomic_load(&prog->cancel))
		e = pr_err(er, -ECANCELED, "cancelled");
	pthread_mutex_destroy(&p.lock);
	mapping_unmap_all(maps, mapped);
	free(maps);
	r->copy_ns = engine_now_ns() - t0;
	return e;
}

int engine_recopy_find(const engine_recopy *r, const wire_object *o, pid_t pid)
{
	if (!r || !r->slot || !r->order)
		return -1;
	int lo = 0, hi = r->objs.n;
	while (lo < hi) { /* the first at or after (pid, va) */
		int mid = (lo + hi) / 2, k = r->order[mid];
		if (r->objs.pids[k] < pid || (r->objs.pids[k] == pid && r->objs.objs[k].va < o->va))
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < r->objs.n; lo++) {
		int k = r->order[lo];
		const wire_object *p = &r->objs.objs[k];
		if (r->objs.pids[k] != pid || p->va != o->va)
			break;
		if (p->size == o->size && p->device == o->device && (p->flags & WIRE_OBJ_APP) == (o->flags & WIRE_OBJ_APP))
			return k;
	}
	return -1;
}

uint32_t engine_recopy_slot(const engine_recopy *r, int k, uint64_t off)
{
	if (k < 0 || !r->co[k])
		return UINT32_MAX;
	cow_header *t;
	_Atomic uint32_t *st = engine_cow_chunk(&r->tables, k, off / r->chunk, &t);
	if (atomic_load(&r->co[k]->freed) || atomic_load(&t->all_dirty) || atomic_load(st) != COW_OFF)
		return UINT32_MAX;
	return r->slot[r->first[k] + off / r->chunk];
}

void engine_recopy_free(engine_recopy *r)
{
	engine_cow_free(&r->tables);
	engine_parked_free(&r->objs);
	free(r->first);
	free(r->slot);
	free(r->co);
	free(r->order);
	memset(r, 0, sizeof(*r));
}
