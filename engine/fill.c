/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Images back to device memory (the fill of a restore). The job makes
 * new allocations in its own context and fills them with a filler:
 * threads (one a CPU, up to ENGINE_FILL_THREADS, unless told) that live
 * as long as it. A pass is one device's objects (all of them for an
 * eager restore, one at a time for a lazy one); its workers take the
 * image's chunks from a shared cursor, so reading and checking run on
 * every worker at once. A worker streams a raw chunk through a small ring
 * of pinned pieces (a stream per device): each piece is read, hashed
 * while still in the cache, and put on the bus while the next is read.
 * Two 2 MiB pieces a worker are the measured best: the workers' reads
 * are the limit, and they are fastest when the pinned memory they write
 * into stays small (4 MiB a worker), while the GPU's copies need to be
 * large (from 16 streams, 1 MiB copies reach 42-45 GB/s of a 53 GB/s
 * bus, 2 MiB 47-48.5, 4 MiB 50-52). With 16 threads on an H100 host the
 * fill ran at 34.4-35.4 GB/s with 2 x 2 MiB, 31.4-31.8 with 4 x 1 MiB,
 * 24.7-26.1 with 4 x 2 MiB and 26.3-27.1 with 2 x 4 MiB, in one run
 * (bench/fill-limits steps 4 and 6: bench/results/fill-limits-h100.txt).
 * Copying straight out of the page cache, with no CPU copy, is slower:
 * registering the store's pages with the driver runs at 13-20 GB/s and
 * no faster from many threads (step 7). Writing the pieces with
 * non-temporal stores slows the GPU's copies (step 6: 36-40 against
 * 45 GB/s), and more threads than 16 do not fill faster, even with 32
 * CPUs (bench/results/fill-limits-h100.txt, fifth session). (The copy
 * out is copy-out.c.)
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fill.h"
#include "mapping.h"

#define PIECES 2             /* pinned pieces a worker has on each device, by default */
#define PIECES_MAX 16
#define PIECE (2u << 20)     /* bytes of each, by default */
#define PIECE_MAX (16u << 20)

engine_fill_tuning engine_fill_tune;

/* One device's share of a fill, which the workers take chunks (the
 * image's) from. */
typedef struct pass {
	int device;
	const mapping *maps;
	const uint32_t *ids; /* the image's object id of each mapping */
	int *objs;           /* this device's objects: indices into maps */
	uint64_t *first;     /* first[i]: chunks before objs[i]; first[n]: all */
	int n;
	_Atomic uint64_t next; /* the next chunk to take */
	_Atomic int error;     /* the first error; the workers stop at it */
	pthread_mutex_t lock;  /* guards err */
	perr err;
} pass;

struct engine_filler {
	phosimg *img; /* the image read */
	uint32_t cs;  /* its chunk size */
	engine_progress *prog;
	pthread_mutex_t lock; /* guards the fields below */
	pthread_cond_t go, idle;
	pass *pass;   /* the pass under way */
	uint64_t gen; /* passes started */
	int busy;     /* workers still in the pass */
	bool stop;
	/* Set at start, then read-only: */
	pthread_t th[ENGINE_FILL_THREADS_MAX];
	int nth;
	int pieces;   /* ring pieces a worker has on a device */
	size_t piece; /* and their bytes */
	bool spin;    /* settle polls */
};

/* A pinned buffer, and the event recorded after the copy out of it.
 * Waiting on the event sleeps (BLOCKING_SYNC) rather than spins, which
 * leaves the CPUs to the other workers' reads. */
typedef struct slot {
	void *buf;
	CUevent done;
	bool busy; /* a copy was queued and not yet waited for */
} slot;

/* A worker's means on one device: a stream, a ring of pieces through
 * which raw chunks stream (each piece read, checked as it goes, and put
 * on the bus while the next is read; a ring small enough to stay in the
 * CPU's cache reads fastest), and after it, slot[WHOLE], a buffer for a
 * whole compressed chunk, made at its first use. */
#define WHOLE PIECES_MAX
typedef struct lane {
	CUstream stream;
	slot slot[PIECES_MAX + 1];
	uint64_t turn; /* pieces used so far */
} lane;

static uint64_t chunks_of(uint64_t size, uint32_t cs)
{
	return (size + cs - 1) / cs;
}

/* Records a worker's error in p, unless an earlier one is there. */
static void pass_fail(pass *p, int e, const perr *er)
{
	pthread_mutex_lock(&p->lock);
	int none = 0;
	if (atomic_compare_exchange_strong(&p->error, &none, e)) {
		pr_copy(&p->err, er);
		p->err.code = e;
	}
	pthread_mutex_unlock(&p->lock);
}

/* Waits for s's copy, if one is queued (polling when spin). */
static int settle(engine_filler *f, slot *s, perr *er)
{
	if (!s->busy)
		return 0;
	s->busy = false;
	uint64_t t0 = f->prog ? engine_now_ns() : 0;
	CUresult r;
	if (f->spin)
		while ((r = cu.cuEventQuery(s->done)) == CUDA_ERROR_NOT_READY)
			sched_yield();
	else if ((r = cu.cuEventQuery(s->done)) == CUDA_ERROR_NOT_READY)
		r = cu.cuEventSynchronize(s->done);
	if (f->prog)
		atomic_fetch_add(&f->prog->fill_wait_ns, engine_now_ns() - t0);
	return r ? driver_fail(r, er, "copying the image to the device") : 0;
}

/* Makes s's pinned buffer of bytes and its event, where not yet made. */
static CUresult slot_make(slot *s, size_t bytes)
{
	CUresult r = s->buf ? CUDA_SUCCESS : cu.cuMemAllocHost(&s->buf, bytes);
	if (!r && !s->done)
		r = cu.cuEventCreate(&s->done, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING);
	return r;
}

/* Queues the copy of len bytes of s to dst on l's stream. */
static int queue(engine_filler *f, lane *l, slot *s, CUdeviceptr dst, size_t len, perr *er)
{
	uint64_t t0 = f->prog ? engine_now_ns() : 0;
	CUresult r = cu.cuMemcpyHtoDAsync(dst, s->buf, len, l->stream);
	if (!r && (r = cu.cuEventRecord(s->done, l->stream)) != CUDA_SUCCESS)
		cu.cuStreamSynchronize(l->stream); /* the copy queued must end before its buffer is used again */
	if (r)
		return driver_fail(r, er, "copying the image to the device");
	s->busy = true;
	if (f->prog) {
		atomic_fetch_add(&f->prog->done, len);
		atomic_fetch_add(&f->prog->fill_queue_ns, engine_now_ns() - t0);
	}
	return 0;
}

static int read_failed(int e, perr *er)
{
	return pr_img(er, e, "reading the image");
}

/* Copies chunk `index` of image object obj (len bytes) to dst: a raw one
 * piece by piece through l's ring, a compressed one whole. A raw chunk's
 * checksum is known at its end, when its pieces are on their way: if it
 * does not match, the fill fails and the memory is not used. */
static int fill(engine_filler *f, phosimg_stream *st, lane *l, uint32_t obj, uint64_t index, uint64_t len,
		CUdeviceptr dst, perr *er)
{
	uint32_t raw = 0;
	uint64_t rd = 0;
	int e = phosimg_stream_start(st, obj, index, &raw);
	if (e == -ENOTSUP) {
		slot *w = &l->slot[WHOLE];
		e = settle(f, w, er);
		if (e)
			return e;
		CUresult r = slot_make(w, f->cs);
		if (r)
			return driver_fail(r, er, "making pinned staging");
		uint64_t t0 = f->prog ? engine_now_ns() : 0;
		e = phosimg_read(f->img, obj, index * f->cs, w->buf, len);
		if (e)
			return read_failed(e, er);
		if (f->prog)
			atomic_fetch_add(&f->prog->fill_read_ns, engine_now_ns() - t0);
		return queue(f, l, w, dst, len, er);
	}
	if (!e && raw != len)
		e = -EBADMSG;
	if (e)
		return read_failed(e, er);
	for (uint64_t at = 0; at < len && !e; at += f->piece) {
		slot *s = &l->slot[l->turn++ % (uint64_t)f->pieces];
		e = settle(f, s, er);
		if (e)
			break;
		size_t n = len - at < f->piece ? (size_t)(len - at) : f->piece;
		uint64_t r0 = f->prog ? engine_now_ns() : 0;
		e = phosimg_stream_read(st, s->buf, n);
		if (f->prog)
			rd += engine_now_ns() - r0;
		if (e)
			return read_failed(e, er);
		e = queue(f, l, s, dst + at, n, er);
	}
	uint64_t r0 = f->prog ? engine_now_ns() : 0;
	int ee = phosimg_stream_end(st);
	if (f->prog)
		atomic_fetch_add(&f->prog->fill_read_ns, rd + engine_now_ns() - r0);
	if (!e && ee)
		e = read_failed(ee, er);
	return e;
}

/* Makes l's stream and ring on the current device, where not yet made. */
static int lane_make(engine_filler *f, lane *l, perr *er)
{
	CUresult r = l->stream ? CUDA_SUCCESS : cu.cuStreamCreate(&l->stream, CU_STREAM_NON_BLOCKING);
	for (int i = 0; i < f->pieces && !r; i++)
		r = slot_make(&l->slot[i], f->piece);
	return r ? driver_fail(r, er, "making pinned staging") : 0;
}

/* Frees what lane_make and fill made of l. */
static void lane_free(lane *l)
{
	for (int i = 0; i <= WHOLE; i++) {
		slot *s = &l->slot[i];
		if (s->done)
			cu.cuEventDestroy(s->done);
		if (s->buf)
			cu.cuMemFreeHost(s->buf);
	}
	if (l->stream)
		cu.cuStreamDestroy(l->stream);
}

/* Takes chunks of pass p until none are left or it failed, through l,
 * p's device's lane. */
static void run(engine_filler *f, pass *p, phosimg_stream *st, lane *l)
{
	perr er = { 0 };
	int e = driver_use(p->device, &er);
	if (!e)
		e = lane_make(f, l, &er);
	uint64_t total = p->first[p->n];
	while (!e && !atomic_load(&p->error)) {
		if (f->prog && atomic_load(&f->prog->cancel)) {
			e = pr_err(&er, -ECANCELED, "cancelled");
			break;
		}
		uint64_t g = atomic_fetch_add(&p->next, 1);
		if (g >= total)
			break;
		int i = mapping_owner(p->first, p->n, g);
		const mapping *m = &p->maps[p->objs[i]];
		uint64_t index = g - p->first[i], off = index * f->cs;
		uint64_t len = m->len - off < f->cs ? m->len - off : f->cs;
		e = fill(f, st, l, p->ids[p->objs[i]], index, len, m->va + off, &er);
	}
	/* Every copy queued ends before the pass does. */
	for (int i = 0; i <= WHOLE; i++) {
		int de = settle(f, &l->slot[i], e ? NULL : &er);
		e = e ? e : de;
	}
	if (e)
		pass_fail(p, e, &er);
}

/* A worker: runs each pass the filler starts, until it stops. */
static void *worker(void *arg)
{
	engine_filler *f = arg;
	lane *lanes = calloc(PHOSIMG_DEVICES_MAX, sizeof(*lanes));
	phosimg_stream *st = NULL;
	int made = lanes ? phosimg_stream_new(f->img, &st) : -ENOMEM;
	uint64_t seen = 0;
	for (;;) {
		pthread_mutex_lock(&f->lock);
		while (!f->stop && f->gen == seen)
			pthread_cond_wait(&f->go, &f->lock);
		pass *p = f->stop ? NULL : f->pass;
		seen = f->gen;
		pthread_mutex_unlock(&f->lock);
		if (!p)
			break;
		perr er;
		if (made)
			pass_fail(p, pr_err(&er, made, "out of memory"), &er);
		else if (p->device >= 0 && p->device < PHOSIMG_DEVICES_MAX)
			run(f, p, st, &lanes[p->device]);
		else
			pass_fail(p, pr_err(&er, -EINVAL, "a device out of range"), &er);
		pthread_mutex_lock(&f->lock);
		if (--f->busy == 0)
			pthread_cond_broadcast(&f->idle);
		pthread_mutex_unlock(&f->lock);
	}
	for (int d = 0; lanes && d < PHOSIMG_DEVICES_MAX; d++) {
		if (!lanes[d].stream)
			continue;
		driver_use(d, NULL);
		lane_free(&lanes[d]);
	}
	free(lanes);
	phosimg_stream_free(st);
	return NULL;
}

int engine_filler_start(phosimg *img, int threads, engine_progress *prog, engine_filler **out, perr *er)
{
	if (threads <= 0) {
		cpu_set_t set;
		int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
		threads = cpus > 0 && cpus < ENGINE_FILL_THREADS ? cpus : ENGINE_FILL_THREADS;
	}
	if (threads > ENGINE_FILL_THREADS_MAX)
		threads = ENGINE_FILL_THREADS_MAX;
	engine_filler *f = calloc(1, sizeof(*f));
	if (!f)
		return pr_err(er, -ENOMEM, "out of memory");
	f->img = img;
	f->prog = prog;
	f->cs = phosimg_get_info(img)->chunk_size;
	f->pieces = engine_fill_tune.pieces > 0 ? engine_fill_tune.pieces : PIECES;
	if (f->pieces > PIECES_MAX)
		f->pieces = PIECES_MAX;
	f->piece = engine_fill_tune.piece_kib > 0 ? (size_t)engine_fill_tune.piece_kib << 10 : PIECE;
	if (f->piece > PIECE_MAX)
		f->piece = PIECE_MAX;
	/* Chunks smaller than a piece: pieces of a chunk, as many as keep the
	 * same bytes in flight. */
	if (!engine_fill_tune.piece_kib && f->cs < f->piece) {
		f->piece = f->cs;
		size_t fit = (size_t)PIECES * PIECE / f->piece;
		if (!engine_fill_tune.pieces)
			f->pieces = fit < PIECES_MAX ? (int)fit : PIECES_MAX;
	}
	f->spin = engine_fill_tune.spin;
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->go, NULL);
	pthread_cond_init(&f->idle, NULL);
	for (; f->nth < threads; f->nth++) {
		int pe = pthread_create(&f->th[f->nth], NULL, worker, f);
		if (pe) {
			engine_filler_stop(f);
			return pr_err(er, -pe, "cannot start a copy thread: %s", strerror(pe));
		}
	}
	*out = f;
	return 0;
}

void engine_filler_stop(engine_filler *f)
{
	if (!f)
		return;
	pthread_mutex_lock(&f->lock);
	f->stop = true;
	pthread_cond_broadcast(&f->go);
	pthread_mutex_unlock(&f->lock);
	for (int i = 0; i < f->nth; i++)
		pthread_join(f->th[i], NULL);
	pthread_mutex_destroy(&f->lock);
	pthread_cond_destroy(&f->go);
	pthread_cond_destroy(&f->idle);
	free(f);
}

/* Runs pass p on every worker and waits for its end; its error. */
static int run_pass(engine_filler *f, pass *p, perr *er)
{
	pthread_mutex_init(&p->lock, NULL);
	pthread_mutex_lock(&f->lock);
	f->pass = p;
	f->gen++;
	f->busy = f->nth;
	pthread_cond_broadcast(&f->go);
	while (f->busy)
		pthread_cond_wait(&f->idle, &f->lock);
	f->pass = NULL;
	pthread_mutex_unlock(&f->lock);
	pthread_mutex_destroy(&p->lock);
	int e = atomic_load(&p->error);
	return e ? pr_copy(er, &p->err) : 0;
}

/* Fills every mapping (all of them already made) from the image, one
 * device at a time. */
static int run_passes(engine_filler *f, const mapping *maps, const uint32_t *ids, int n, perr *er)
{
	int *objs = calloc(n ? (size_t)n : 1, sizeof(*objs));
	uint64_t *first = calloc((size_t)n + 1, sizeof(*first));
	bool *done = calloc(n ? (size_t)n : 1, sizeof(*done));
	int e = objs && first && done ? 0 : -ENOMEM;
	for (int k = 0; k < n && !e; k++) {
		if (done[k])
			continue;
		pass p = { .device = maps[k].device, .maps = maps, .ids = ids, .objs = objs, .first = first };
		for (int j = k; j < n; j++) {
			if (done[j] || maps[j].device != p.device)
				continue;
			done[j] = true;
			objs[p.n] = j;
			first[p.n + 1] = first[p.n] + chunks_of(maps[j].len, f->cs);
			p.n++;
		}
		e = run_pass(f, &p, er);
	}
	free(objs);
	free(first);
	free(done);
	return e;
}

/* Makes one allocation of at least size bytes for image object o on dev
 * (host memory: on its NUMA node, reached from dev), exportable as an
 * fd. */
static int create(mapping *m, const phosimg_object *o, uint64_t size, int dev, perr *er)
{
	CUmemLocation at = { CU_MEM_LOCATION_TYPE_DEVICE, dev };
	if (o->flags & PHOSIMG_OBJ_HOST)
		at = (CUmemLocation){ CU_MEM_LOCATION_TYPE_HOST_NUMA, (int)PHOSIMG_OBJ_NUMA(o->flags) };
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
				     .location = at };
	size_t gran = 0;
	CUresult r = cu.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (r || !gran)
		return driver_fail(r, er, "asking the allocation granularity");
	size_t bytes = (size + gran - 1) / gran * gran;
	CUmemGenericAllocationHandle h;
	r = cu.cuMemCreate(&h, bytes, &prop, 0);
	if (r)
		return driver_fail(r, er, o->flags & PHOSIMG_OBJ_HOST ? "allocating host memory" : "allocating device memory");
	return mapping_map(m, h, bytes, dev, er);
}

/* The record of image object o, as its tracer knows it. */
static wire_object record_of(const phosimg_object *o)
{
	bool app = o->flags & PHOSIMG_OBJ_APP_VMM;
	uint32_t host = o->flags & PHOSIMG_OBJ_HOST ? WIRE_OBJ_HOST | PHOSIMG_OBJ_NUMA(o->flags) << 16 : 0;
	return (wire_object){ .key = app ? o->key : o->va, .va = o->va, .size = o->size, .device = o->device,
			      .flags = (app ? WIRE_OBJ_APP : 0) | host };
}

/* Exports m's memory as an fd (its device's context current). */
static int export(const mapping *m, int *fd, perr *er)
{
	*fd = -1;
	int e = driver_use(m->device, er);
	CUresult r = e ? CUDA_SUCCESS : cu.cuMemExportToShareableHandle(fd, m->h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	return e ? e : r ? driver_fail(r, er, "exporting device memory") : 0;
}

int engine_copy_in(phosimg *img, const engine_devmap *map, const bool *sel, int threads, engine_parked *out,
		   engine_progress *prog, perr *er)
{
	const phosimg_info *in = phosimg_get_info(img);
	memset(out, 0, sizeof(*out));
	int all = (int)in->object_count, n = 0;
	for (int k = 0; k < all; k++)
		n += !sel || sel[k];
	out->objs = calloc(n ? (size_t)n : 1, sizeof(*out->objs));
	out->fds = calloc(n ? (size_t)n : 1, sizeof(*out->fds));
	out->pids = calloc(n ? (size_t)n : 1, sizeof(*out->pids));
	mapping *maps = calloc(n ? (size_t)n : 1, sizeof(*maps));
	uint32_t *ids = calloc(n ? (size_t)n : 1, sizeof(*ids));
	int e = out->objs && out->fds && out->pids && maps && ids ? 0 : -ENOMEM;
	if (e)
		pr_err(er, e, "out of memory");
	out->cap = n;
	for (int k = 0, i = 0; k < all && !e; k++) {
		if (sel && !sel[k])
			continue;
		const phosimg_object *o = &in->objects[k];
		ids[i] = (uint32_t)k;
		int dev = engine_devmap_to(map, o->device);
		e = driver_use(dev, er);
		if (!e)
			e = create(&maps[i], o, o->size, dev, er);
		/* The object's bytes, not the rounded-up allocation's. */
		maps[i++].len = o->size;
	}
	engine_filler *f = NULL;
	if (!e && n)
		e = engine_filler_start(img, threads, prog, &f, er);
	if (!e && n)
		e = run_passes(f, maps, ids, n, er);
	engine_filler_stop(f);
	for (int i = 0; i < n && !e; i++) {
		const phosimg_object *o = &in->objects[ids[i]];
		int fd;
		e = export(&maps[i], &fd, er);
		if (e)
			break;
		out->objs[i] = record_of(o);
		out->fds[i] = fd;
		out->pids[i] = o->pid;
		out->n = i + 1;
	}
	/* The fds keep the memory; phosfs's mappings and handles go. */
	if (maps)
		mapping_unmap_all(maps, n);
	free(maps);
	free(ids);
	if (e)
		engine_parked_free(out);
	return e;
}

int engine_fill_object(engine_filler *f, uint32_t k, int dev, wire_object *rec, int *fd, perr *er)
{
	const phosimg_info *in = phosimg_get_info(f->img);
	*fd = -1;
	if (k >= in->object_count)
		return pr_err(er, -EINVAL, "no object %u in the image", k);
	const phosimg_object *o = &in->objects[k];
	mapping m = { 0 };
	int e = driver_use(dev, er);
	if (!e)
		e = create(&m, o, o->size, dev, er);
	m.len = o->size;
	int idx = 0;
	uint64_t first[2] = { 0, chunks_of(o->size, f->cs) };
	pass p = { .device = dev, .maps = &m, .ids = &k, .objs = &idx, .first = first, .n = 1 };
	if (!e)
		e = run_pass(f, &p, er);
	if (!e)
		e = export(&m, fd, er);
	if (!e)
		*rec = record_of(o);
	mapping_unmap_all(&m, 1);
	return e;
}
