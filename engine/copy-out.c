/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Device memory into an image, in two tiers (as DataStates-LLM flushes):
 *
 *   copiers  COPIERS threads take chunks in priority order and move each
 *            from the device into a free slot of the pinned staging pool,
 *            at the bus's speed;
 *   writers  WRITERS threads take full slots, hash and write them into
 *            the image (phosimg_writer_put, safe from many threads), and
 *            free the slots, at the store's speed.
 *
 * When the pool holds every chunk, the GPU side finishes at bus speed
 * however slow the store is. That matters for CoW: once every t1 byte is
 * off the GPU, the tracers stop protecting (engine_cow_end).
 *
 * Order: a chunk a call waits for (COW_URGENT) first, then objects by
 * their write history, most written first, each from its start. With
 * CoW, each chunk is claimed by compare-and-swap on its state word: a
 * pending chunk is copied from the object, a shadowed one from its slot
 * of the shadow pool; one whose shadow copy is still queued is put aside
 * and taken again later.
 *
 * The lock guards the slot free list, the queue of full slots, the
 * chunks put aside, `copiers`, `writing` and the error text.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "copy-out.h"
#include "mapping.h"
#include "tree.h"

#define COPIERS 4
#define WRITERS ENGINE_WRITERS
#define PCIE_PAUSE_MAX_NS 10000000ull /* give way to the application's transfers this long at most */

typedef struct item {
	uint32_t slot; /* in the staging pool */
	uint32_t obj;  /* the image's object id */
	uint64_t off;
	uint32_t len;
} item;

typedef struct engine_copy outjob;
struct engine_copy {
	const engine_parked *objs;
	mapping *maps;
	const uint32_t *ids;
	phosimg_writer *w;
	engine_progress *prog;
	engine_cow *cow;
	uint32_t chunk;
	uint64_t t1_ns;
	int n;
	uint64_t *first; /* first[k]: global id of object k's first chunk; first[n]: all */
	uint64_t *order; /* global chunk ids, in the order they are taken */
	uint32_t *pre;   /* recopy: per chunk, the staging slot that holds it already, or UINT32_MAX */
	uint64_t nchunks;
	_Atomic uint64_t cursor;
	_Atomic uint64_t left; /* chunks not yet off the GPU */
	_Atomic uint64_t shared_left; /* of which of objects other members map */
	uint8_t *pool;
	uint32_t nslots;

	pthread_mutex_t lock;
	pthread_cond_t moved; /* a slot was freed or queued, or a thread ended */
	uint32_t *free_slots, nfree;
	item *queue; /* a ring of nslots */
	uint32_t qhead, qlen;
	uint64_t *aside;
	uint64_t naside;
	int copiers, writing; /* threads of each kind still running */
	_Atomic uint64_t moves; /* chunks off the GPU or into the image so far */
	_Atomic int error;
	perr err;          /* the first error; guarded by lock */
	pthread_t th[COPIERS + WRITERS];
	int nc, nw; /* copiers and writers started */
};

/* The copy failed with e, er saying why (NULL: nothing more): the first
 * error is the copy's. */
static void fail(outjob *j, int e, const perr *er)
{
	pthread_mutex_lock(&j->lock);
	int none = 0;
	if (atomic_compare_exchange_strong(&j->error, &none, e)) {
		if (er)
			pr_copy(&j->err, er);
		j->err.code = e;
	}
	pthread_cond_broadcast(&j->moved);
	pthread_mutex_unlock(&j->lock);
}

/* The object holding global chunk g. */
static int object_of(const outjob *j, uint64_t g)
{
	return mapping_owner(j->first, j->n, g);
}

static _Atomic uint32_t *state_of(const outjob *j, uint64_t g, cow_header **t)
{
	int k = object_of(j, g);
	return engine_cow_chunk(j->cow, k, g - j->first[k], t);
}

/* A chunk a call waits for, or UINT64_MAX. */
static uint64_t urgent(outjob *j)
{
	bool any = false;
	for (int i = 0; i < j->cow->n; i++)
		any |= j->cow->m[i].t && atomic_load(&j->cow->m[i].t->urgent) > 0;
	if (!any)
		return UINT64_MAX;
	for (uint64_t g = 0; g < j->nchunks; g++) {
		cow_header *t;
		uint32_t v = atomic_load(state_of(j, g, &t));
		if ((v & COW_URGENT) && (v & COW_STATE_MASK) == COW_PENDING) {
			uint32_t u = atomic_load(&t->urgent);
			while (u && !atomic_compare_exchange_weak(&t->urgent, &u, u - 1))
				;
			return g;
		}
	}
	for (int i = 0; i < j->cow->n; i++)
		if (j->cow->m[i].t)
			atomic_store(&j->cow->m[i].t->urgent, 0);
	return UINT64_MAX;
}

/* The next chunk to try, or UINT64_MAX when none is left to start. */
static uint64_t pick(outjob *j, bool *aside)
{
	*aside = false;
	if (j->cow) {
		uint64_t g = urgent(j);
		if (g != UINT64_MAX)
			return g;
	}
	for (uint64_t c; (c = atomic_fetch_add(&j->cursor, 1)) < j->nchunks;)
		if (!j->pre || j->pre[j->order[c]] == UINT32_MAX)
			return j->order[c];
	pthread_mutex_lock(&j->lock);
	uint64_t g = j->naside ? j->aside[--j->naside] : UINT64_MAX;
	pthread_mutex_unlock(&j->lock);
	*aside = g != UINT64_MAX;
	return g;
}

static void put_aside(outjob *j, uint64_t g)
{
	pthread_mutex_lock(&j->lock);
	j->aside[j->naside++] = g;
	pthread_mutex_unlock(&j->lock);
}

/* Waits for a free staging slot; UINT32_MAX after an error. */
static uint32_t take_slot(outjob *j)
{
	pthread_mutex_lock(&j->lock);
	while (!j->nfree && !atomic_load(&j->error))
		pthread_cond_wait(&j->moved, &j->lock);
	uint32_t s = j->nfree && !atomic_load(&j->error) ? j->free_slots[--j->nfree] : UINT32_MAX;
	pthread_mutex_unlock(&j->lock);
	return s;
}

static void give_slot(outjob *j, uint32_t s)
{
	pthread_mutex_lock(&j->lock);
	j->free_slots[j->nfree++] = s;
	pthread_cond_broadcast(&j->moved);
	pthread_mutex_unlock(&j->lock);
}

/* Where chunk g comes from: its object, or its shadow. 0: claimed;
 * 1: not now (put aside or taken by another); */
static int claim(outjob *j, uint64_t g, bool aside, CUdeviceptr *src, cow_header **t, _Atomic uint32_t **st,
		 uint32_t *shadow)
{
	int k = object_of(j, g);
	uint64_t off = (g - j->first[k]) * j->chunk;
	*src = j->maps[k].va + off;
	*shadow = COW_NO_SLOT;
	*st = NULL;
	if (!j->cow)
		return 0;
	*st = state_of(j, g, t);
	for (;;) {
		uint32_t v = atomic_load(*st);
		switch (v & COW_STATE_MASK) {
		case COW_PENDING:
			if (atomic_compare_exchange_weak(*st, &v, COW_COPYING))
				return 0;
			continue;
		case COW_SHADOWED: {
			uint32_t slot = v >> COW_SLOT_SHIFT;
			const engine_cow_member *m = &j->cow->m[j->cow->table_of[k]];
			if (slot >= (*t)->nslots)
				return -EPROTO;
			if (!atomic_compare_exchange_weak(*st, &v, (v & ~COW_STATE_MASK) | COW_READING))
				continue;
			*src = m->pool_va + (uint64_t)slot * j->chunk;
			*shadow = slot;
			return 0;
		}
		case COW_SHADOWING:
			/* Its shadow copy is still queued on the application's
			 * stream; it ends unless the process does. */
			if (aside && !engine_alive((*t)->pid))
				return -ESRCH;
			put_aside(j, g);
			if (aside)
				usleep(100);
			return 1;
		default:
			return 1; /* taken by another copier (it was urgent), or off */
		}
	}
}

/* Gives way to the application's own transfers, for a while. */
static void pause_for_app(outjob *j)
{
	if (!j->cow)
		return;
	uint64_t from = 0;
	for (;;) {
		bool busy = false;
		for (int i = 0; i < j->cow->n; i++)
			busy |= j->cow->m[i].t && atomic_load(&j->cow->m[i].t->pcie_pending) > 0;
		if (!busy)
			return;
		uint64_t now = engine_now_ns();
		if (!from)
			from = now;
		else if (now - from > PCIE_PAUSE_MAX_NS)
			return;
		usleep(20);
	}
}

/* A chunk of object k is off the GPU. */
static void chunk_off(outjob *j, int k, cow_header *t, _Atomic uint32_t *st, uint32_t shadow, uint32_t len)
{
	if ((j->objs->objs[k].flags & WIRE_OBJ_SHARED) && atomic_fetch_sub(&j->shared_left, 1) == 1) {
		pthread_mutex_lock(&j->lock);
		pthread_cond_broadcast(&j->moved);
		pthread_mutex_unlock(&j->lock);
	}
	if (st) {
		atomic_store(st, COW_OFF);
		if (shadow != COW_NO_SLOT)
			atomic_fetch_and(&cow_slots(t)[shadow / 64], ~(1ull << (shadow % 64)));
		atomic_fetch_add(&t->off, 1);
		engine_cow_wake(t);
	}
	if (j->prog) {
		atomic_fetch_add(&j->prog->off, len);
		if (j->cow)
			engine_cow_stats(j->cow, j->prog);
	}
	if (atomic_fetch_sub(&j->left, 1) == 1) {
		if (j->prog && j->t1_ns)
			atomic_store(&j->prog->off_ns, engine_now_ns() - j->t1_ns);
		if (j->cow)
			engine_cow_end(j->cow);
		pthread_mutex_lock(&j->lock);
		pthread_cond_broadcast(&j->moved);
		pthread_mutex_unlock(&j->lock);
	}
}

static void *copier(void *arg)
{
	outjob *j = arg;
	perr er = { 0 };
	mapping_streams ss = { .dev = -1 };
	int e = 0;
	while (!e && !atomic_load(&j->error)) {
		if (j->prog && atomic_load(&j->prog->cancel)) {
			e = pr_err(&er, -ECANCELED, "cancelled");
			break;
		}
		bool aside;
		uint64_t g = pick(j, &aside);
		if (g == UINT64_MAX)
			break;
		uint32_t slot = take_slot(j);
		if (slot == UINT32_MAX)
			break;
		CUdeviceptr src;
		cow_header *t = NULL;
		_Atomic uint32_t *st;
		uint32_t shadow;
		int c = claim(j, g, aside, &src, &t, &st, &shadow);
		if (c) {
			give_slot(j, slot);
			if (c == -ESRCH)
				e = pr_err(&er, c, "process %d ended with a CoW shadow copy still queued", (int)t->pid);
			else if (c < 0)
				e = pr_err(&er, c, "a CoW table holds a bad shadow slot");
			continue;
		}
		int k = object_of(j, g);
		const mapping *m = &j->maps[k];
		uint64_t off = (g - j->first[k]) * j->chunk;
		uint32_t len = m->len - off < j->chunk ? (uint32_t)(m->len - off) : j->chunk;
		pause_for_app(j);
		e = mapping_copy_out(&ss, m->device, j->pool + (uint64_t)slot * j->chunk, src, len, &er);
		if (e) {
			if (st) /* give the chunk back: the copy has failed anyway */
				atomic_store(st, shadow == COW_NO_SLOT ? COW_PENDING
								       : (shadow << COW_SLOT_SHIFT) | COW_SHADOWED);
			give_slot(j, slot);
			break;
		}
		chunk_off(j, k, t, st, shadow, len);
		pthread_mutex_lock(&j->lock);
		j->queue[(j->qhead + j->qlen++) % j->nslots] = (item){ slot, j->ids[k], off, len };
		atomic_fetch_add(&j->moves, 1);
		pthread_cond_broadcast(&j->moved);
		pthread_mutex_unlock(&j->lock);
	}
	mapping_streams_free(&ss);
	if (e)
		fail(j, e, &er);
	pthread_mutex_lock(&j->lock);
	j->copiers--;
	pthread_cond_broadcast(&j->moved);
	pthread_mutex_unlock(&j->lock);
	return NULL;
}

static void *writer(void *arg)
{
	outjob *j = arg;
	for (;;) {
		pthread_mutex_lock(&j->lock);
		while (!j->qlen && j->copiers > 0)
			pthread_cond_wait(&j->moved, &j->lock);
		if (!j->qlen) {
			j->writing--;
			pthread_cond_broadcast(&j->moved);
			pthread_mutex_unlock(&j->lock);
			return NULL;
		}
		item it = j->queue[j->qhead];
		j->qhead = (j->qhead + 1) % j->nslots;
		j->qlen--;
		pthread_mutex_unlock(&j->lock);
		if (!atomic_load(&j->error)) {
			int e = phosimg_writer_put(j->w, it.obj, it.off, j->pool + (uint64_t)it.slot * j->chunk, it.len);
			if (e) {
				perr er;
				fail(j, pr_img(&er, e, "writing the image"), &er);
			} else if (j->prog) {
				atomic_fetch_add(&j->prog->done, it.len);
				/* Puts finish out of order: the largest value seen wins. */
				uint64_t ready = phosimg_writer_data_ready(j->w), was = atomic_load(&j->prog->data_ready);
				while (was < ready && !atomic_compare_exchange_weak(&j->prog->data_ready, &was, ready))
					;
			}
		}
		atomic_fetch_add(&j->moves, 1);
		give_slot(j, it.slot);
	}
}

static int by_writes(const void *a, const void *b, void *arg)
{
	const wire_object *objs = arg;
	const wire_object *x = &objs[*(const int *)a], *y = &objs[*(const int *)b];
	if ((x->flags ^ y->flags) & WIRE_OBJ_SHARED)
		return x->flags & WIRE_OBJ_SHARED ? -1 : 1;
	if (x->writes != y->writes)
		return x->writes > y->writes ? -1 : 1;
	return *(const int *)a - *(const int *)b;
}

/* Fills j->order: objects other members map first (the stall may wait
 * for them), then those most written, each from its start. */
static int plan(outjob *j)
{
	int *idx = calloc(j->n ? (size_t)j->n : 1, sizeof(*idx));
	j->order = calloc(j->nchunks ? j->nchunks : 1, sizeof(*j->order));
	if (!idx || !j->order) {
		free(idx);
		return -ENOMEM;
	}
	for (int k = 0; k < j->n; k++)
		idx[k] = k;
	qsort_r(idx, (size_t)j->n, sizeof(*idx), by_writes, (void *)j->objs->objs);
	uint64_t at = 0;
	for (int i = 0; i < j->n; i++)
		for (uint64_t g = j->first[idx[i]]; g < j->first[idx[i] + 1]; g++)
			j->order[at++] = g;
	free(idx);
	return 0;
}

int engine_staging_alloc(engine_staging *s, int fd, uint64_t want, uint32_t chunk, perr *er)
{
	memset(s, 0, sizeof(*s));
	int e = driver_use(0, er);
	if (e)
		return e;
	uint64_t t0 = engine_now_ns(), min = 4ull * chunk;
	want = want < min ? min : want / chunk * chunk;
	struct stat st;
	if (fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_size >= min) {
		uint64_t b = want < (uint64_t)st.st_size ? want : (uint64_t)st.st_size / chunk * chunk;
		void *p = mmap(NULL, b, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
		/* Portable: the copiers of every GPU's context copy into it. */
		if (p != MAP_FAILED && cu.cuMemHostRegister(p, b, CU_MEMHOSTREGISTER_PORTABLE) == CUDA_SUCCESS) {
			*s = (engine_staging){ .buf = p, .bytes = b, .registered = true, .pin_ns = engine_now_ns() - t0 };
			return 0;
		}
		if (p != MAP_FAILED)
			munmap(p, b);
	}
	for (uint64_t b = want; b >= min; b = b / 2 / chunk * chunk) {
		if (cu.cuMemAllocHost(&s->buf, b) == CUDA_SUCCESS) {
			s->bytes = b;
			s->pin_ns = engine_now_ns() - t0;
			return 0;
		}
		s->buf = NULL;
	}
	return pr_err(er, -ENOMEM, "cannot pin %llu MiB of host memory for staging",
		      (unsigned long long)(min >> 20));
}

void engine_staging_free(engine_staging *s)
{
	if (s->buf && s->registered) {
		cu.cuMemHostUnregister(s->buf);
		munmap(s->buf, s->bytes);
	} else if (s->buf) {
		cu.cuMemFreeHost(s->buf);
	}
	memset(s, 0, sizeof(*s));
}

static void job_free(outjob *j)
{
	if (j->maps)
		mapping_unmap_all(j->maps, j->n);
	free(j->maps);
	free((void *)j->ids);
	free(j->first);
	free(j->order);
	free(j->pre);
	free(j->free_slots);
	free(j->queue);
	free(j->aside);
	free(j);
}

/* Recopy: each chunk that staging still holds from the copy made while
 * the process ran is marked in j->pre (and OFF in the CoW tables), its
 * slot in held, and goes to the writers' queue at once; *n of them,
 * *bytes in all. */
static int take_staged(outjob *j, const engine_recopy *r, bool *held, uint64_t *n, uint64_t *bytes)
{
	j->pre = malloc((j->nchunks ? j->nchunks : 1) * sizeof(*j->pre));
	if (!j->pre)
		return -ENOMEM;
	for (int k = 0; k < j->n; k++) {
		/* Other members' writes to it were not tracked. */
		int tk = j->objs->objs[k].flags & WIRE_OBJ_SHARED ? -1
								  : engine_recopy_find(r, &j->objs->objs[k], j->objs->pids[k]);
		for (uint64_t g = j->first[k]; g < j->first[k + 1]; g++) {
			uint64_t off = (g - j->first[k]) * j->chunk;
			uint32_t s = r->chunk == j->chunk ? engine_recopy_slot(r, tk, off) : UINT32_MAX;
			j->pre[g] = s < j->nslots && !held[s] ? s : UINT32_MAX;
			if (j->pre[g] == UINT32_MAX)
				continue;
			held[s] = true;
			if (j->cow) { /* its bytes at t2 are off the GPU already */
				cow_header *t;
				atomic_store(state_of(j, g, &t), COW_OFF);
				atomic_fetch_add(&t->off, 1);
			}
			uint32_t len = j->maps[k].len - off < j->chunk ? (uint32_t)(j->maps[k].len - off) : j->chunk;
			j->queue[(j->qhead + j->qlen++) % j->nslots] = (item){ s, j->ids[k], off, len };
			(*n)++;
			*bytes += len;
		}
	}
	return 0;
}

/* Adds each object to the image (its id into ids), maps it here, and
 * numbers its chunks (j->first). */
static int add_objects(outjob *j, uint32_t *ids, perr *er)
{
	const engine_parked *objs = j->objs;
	for (int k = 0; k < j->n; k++) {
		const wire_object *ob = &objs->objs[k];
		phosimg_object io = { .device = ob->device, .va = ob->va, .size = ob->size, .pid = objs->pids[k] };
		if (ob->flags & WIRE_OBJ_APP) {
			io.flags = PHOSIMG_OBJ_APP_VMM;
			io.key = (uint32_t)ob->key;
		}
		if (ob->flags & WIRE_OBJ_HOST)
			io.flags |= PHOSIMG_OBJ_HOST | WIRE_OBJ_NUMA(ob->flags) << 16;
		int e = phosimg_writer_add_object(j->w, &io, &ids[k]);
		if (e)
			return pr_perror(er, e, "adding an object to the image");
		e = mapping_import(&j->maps[k], objs->fds[k], ob->size, (int)ob->device, er);
		j->first[k + 1] = j->first[k] + (ob->size + j->chunk - 1) / j->chunk;
		if (e)
			return e;
	}
	return 0;
}

/* Starts the copiers and the writers; a copy that cannot start either
 * fails. */
static void start(outjob *j)
{
	j->copiers = COPIERS;
	for (; j->nc < (j->nchunks ? COPIERS : 0); j->nc++)
		if (pthread_create(&j->th[j->nc], NULL, copier, j))
			break;
	pthread_mutex_lock(&j->lock);
	j->copiers -= COPIERS - j->nc; /* those that did not start */
	pthread_cond_broadcast(&j->moved);
	pthread_mutex_unlock(&j->lock);
	j->writing = WRITERS;
	for (; j->nw < (j->nchunks ? WRITERS : 0); j->nw++)
		if (pthread_create(&j->th[COPIERS + j->nw], NULL, writer, j))
			break;
	pthread_mutex_lock(&j->lock);
	j->writing -= WRITERS - j->nw;
	pthread_mutex_unlock(&j->lock);
	perr er;
	if (j->nchunks && (!j->nc || !j->nw))
		fail(j, pr_err(&er, -EAGAIN, "cannot start the copy threads"), &er);
}

int engine_copy_begin(const engine_parked *objs, phosimg_writer *w, const engine_copy_opts *o, engine_progress *prog,
		      engine_copy **out, perr *er)
{
	*out = NULL;
	int n = objs->n;
	outjob *j = calloc(1, sizeof(*j));
	if (!j)
		return pr_err(er, -ENOMEM, "out of memory");
	*j = (outjob){ .objs = objs, .w = w, .prog = prog, .cow = o->cow, .chunk = o->chunk, .t1_ns = o->t1_ns,
		       .n = n, .pool = o->staging, .nslots = (uint32_t)(o->staging_bytes / o->chunk) };
	mapping *maps = j->maps = calloc(n ? (size_t)n : 1, sizeof(*maps));
	uint32_t *ids = calloc(n ? (size_t)n : 1, sizeof(*ids));
	j->ids = ids;
	j->first = calloc((size_t)n + 1, sizeof(*j->first));
	int e = maps && ids && j->first ? 0 : pr_err(er, -ENOMEM, "out of memory");
	if (!e && (!j->pool || j->nslots < 2))
		e = pr_err(er, -EINVAL, "no staging memory for the copy");
	if (!e)
		e = add_objects(j, ids, er);
	j->nchunks = n && j->first ? j->first[n] : 0;
	atomic_store(&j->left, j->nchunks);
	for (int k = 0; !e && k < n; k++)
		if (objs->objs[k].flags & WIRE_OBJ_SHARED)
			atomic_fetch_add(&j->shared_left, j->first[k + 1] - j->first[k]);
	j->free_slots = calloc(j->nslots ? j->nslots : 1, sizeof(*j->free_slots));
	j->queue = calloc(j->nslots ? j->nslots : 1, sizeof(*j->queue));
	j->aside = calloc(j->nchunks ? j->nchunks : 1, sizeof(*j->aside));
	if (!e && (!j->free_slots || !j->queue || !j->aside || plan(j)))
		e = pr_err(er, -ENOMEM, "out of memory");
	if (e) {
		job_free(j);
		return e;
	}
	/* Recopy: what staging holds already goes to the writers at once,
	 * and its slots are not free. */
	uint64_t npre = 0, pre_bytes = 0;
	bool *held = calloc(j->nslots ? j->nslots : 1, sizeof(*held));
	e = held ? 0 : -ENOMEM;
	if (!e && o->recopy)
		e = take_staged(j, o->recopy, held, &npre, &pre_bytes);
	if (e) {
		free(held);
		job_free(j);
		return pr_err(er, e, "out of memory");
	}
	for (uint32_t sl = 0; sl < j->nslots; sl++)
		if (!held[j->nslots - 1 - sl])
			j->free_slots[j->nfree++] = j->nslots - 1 - sl;
	free(held);
	atomic_store(&j->left, j->nchunks - npre);
	if (prog) {
		atomic_fetch_add(&prog->off, pre_bytes);
		atomic_store(&prog->recopy_clean, pre_bytes);
	}
	pthread_mutex_init(&j->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* idle_ns() */
	pthread_cond_init(&j->moved, &ca);
	pthread_condattr_destroy(&ca);
	if (!atomic_load(&j->left)) {
		if (j->cow)
			engine_cow_end(j->cow);
		if (prog && j->t1_ns)
			atomic_store(&prog->off_ns, engine_now_ns() - j->t1_ns);
	}
	start(j);
	*out = j;
	return 0;
}

/* Waits on `moved` (lock held) for at most 100 ms, then looks at *count:
 * returns how long, in ns, it has not moved from *seen (since *since),
 * and notes it when it has. The waits with a deadline look that often. */
static uint64_t idle_ns(engine_copy *j, _Atomic uint64_t *count, uint64_t *seen, uint64_t *since)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts); /* the clock `moved` waits on */
	ts.tv_nsec += 100 * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&j->moved, &j->lock, &ts);
	uint64_t now = engine_now_ns(), n = atomic_load(count);
	if (n != *seen) {
		*seen = n;
		*since = now;
	}
	return now - *since;
}

/* Waits until the count of chunks *left is 0, the copy fails or its
 * copiers are gone; with idle_s > 0, -ETIME once the count has not moved
 * for that long (a copy's own error is never -ETIME). */
static int wait_none_left(engine_copy *j, _Atomic uint64_t *left, int idle_s)
{
	uint64_t seen = atomic_load(left), since = engine_now_ns();
	uint64_t idle = idle_s > 0 ? (uint64_t)idle_s * 1000000000ull : 0;
	bool late = false;
	pthread_mutex_lock(&j->lock);
	while (atomic_load(left) && !atomic_load(&j->error) && j->copiers > 0 && !late) {
		if (!idle) {
			pthread_cond_wait(&j->moved, &j->lock);
			continue;
		}
		late = idle_ns(j, left, &seen, &since) >= idle;
	}
	pthread_mutex_unlock(&j->lock);
	int e = atomic_load(&j->error);
	return e ? (e == -ETIME ? -EIO : e) : !atomic_load(left) ? 0 : late ? -ETIME : -EIO;
}

int engine_copy_wait_off(engine_copy *j, int idle_s)
{
	return wait_none_left(j, &j->left, idle_s);
}

int engine_copy_wait_shared(engine_copy *j, int idle_s)
{
	return wait_none_left(j, &j->shared_left, idle_s);
}

uint32_t engine_copy_object_id(const engine_copy *j, int k)
{
	return j->ids[k];
}

void engine_copy_cancel(engine_copy *j)
{
	perr er;
	fail(j, pr_err(&er, -ECANCELED, "cancelled: the checkpoint failed"), &er);
}

int engine_copy_error(engine_copy *j)
{
	return atomic_load(&j->error);
}

/* Copies whose threads engine_copy_end left running. */
static _Atomic int abandoned;

bool engine_copy_abandoned(void)
{
	return atomic_load(&abandoned) > 0;
}

/* Waits until every thread of the copy has ended. With idle_s > 0, a copy
 * in which no chunk moved for idle_s is cancelled (-ETIMEDOUT), and one
 * cancelled already gets ENGINE_COPY_GRACE_S for its threads to end:
 * false if they did not. */
static bool threads_end(outjob *j, int idle_s)
{
	bool cancelled = atomic_load(&j->error) != 0;
	uint64_t seen = atomic_load(&j->moves), since = engine_now_ns();
	uint64_t limit = (uint64_t)(cancelled ? ENGINE_COPY_GRACE_S : idle_s) * 1000000000ull;
	bool ended = true;
	pthread_mutex_lock(&j->lock);
	while (j->copiers > 0 || j->writing > 0) {
		if (!idle_s) {
			pthread_cond_wait(&j->moved, &j->lock);
			continue;
		}
		if (idle_ns(j, &j->moves, &seen, &since) < limit)
			continue;
		if (cancelled) {
			ended = false;
			break;
		}
		pthread_mutex_unlock(&j->lock);
		perr er;
		fail(j, pr_err(&er, -ETIMEDOUT, "the copy made no chunk of progress for %d s (a device copy or the store hangs)",
			       idle_s), &er);
		pthread_mutex_lock(&j->lock);
		cancelled = true;
		since = engine_now_ns();
		limit = (uint64_t)ENGINE_COPY_GRACE_S * 1000000000ull;
	}
	pthread_mutex_unlock(&j->lock);
	return ended;
}

int engine_copy_end(engine_copy *j, int idle_s, perr *er)
{
	if (!threads_end(j, idle_s)) {
		/* What they use stays: they may still wake up. */
		atomic_fetch_add(&abandoned, 1);
		return pr_err(er, -ETIMEDOUT,
			      "the copy's threads did not end within %d s of its cancel (a device copy or the store hangs); "
			      "they are left to the job process's exit",
			      ENGINE_COPY_GRACE_S);
	}
	for (int i = 0; i < j->nc; i++)
		pthread_join(j->th[i], NULL);
	if (!j->nw) { /* nobody frees the queued slots: drop them */
		pthread_mutex_lock(&j->lock);
		j->qlen = 0;
		pthread_mutex_unlock(&j->lock);
	}
	for (int i = 0; i < j->nw; i++)
		pthread_join(j->th[COPIERS + i], NULL);
	int e = atomic_load(&j->error);
	if (!e && atomic_load(&j->left))
		e = pr_err(er, -EIO, "%llu chunks were not copied", (unsigned long long)atomic_load(&j->left));
	else if (e)
		pr_copy(er, &j->err);
	if (j->cow)
		engine_cow_end(j->cow);
	pthread_cond_destroy(&j->moved);
	pthread_mutex_destroy(&j->lock);
	job_free(j);
	return e;
}

int engine_copy_out(const engine_parked *objs, phosimg_writer *w, const engine_copy_opts *o, engine_progress *prog,
		    perr *er)
{
	engine_copy *j;
	int e = engine_copy_begin(objs, w, o, prog, &j, er);
	return e ? e : engine_copy_end(j, 0, er);
}
