/*
 * Images back to device memory (the fill of a restore). The job makes
 * new allocations in its own context and fills them with a filler:
 * threads (one a CPU, up to ENGINE_FILL_THREADS, unless told) that live
 * as long as it, each with NBUF pinned buffers and a stream per device,
 * so that one chunk is on the bus while the next is read from the image
 * (and checked: the reader hashes each piece as it reads it). A pass is
 * one device's objects (all of them for an eager restore, one at a time
 * for a lazy one); its workers take chunks from a shared cursor. The reader is safe from several
 * threads, so reading and checking run on every worker at once. (The copy
 * out is copy-out.c.)
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mapping.h"

#define NBUF 2

/* One device's share of a fill, which the workers take chunks from. */
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
	char err[ENGINE_ERR_MAX];
} pass;

struct engine_filler {
	phosimg *img; /* the image read */
	engine_progress *prog;
	pthread_mutex_t lock; /* guards the fields below */
	pthread_cond_t go, idle;
	pass *pass;   /* the pass under way */
	uint64_t gen; /* passes started */
	int busy;     /* workers still in the pass */
	bool stop;
	pthread_t th[ENGINE_FILL_THREADS_MAX];
	int nth;
};

/* A pinned buffer, its stream and the chunk it holds. */
typedef struct slot {
	void *buf;
	CUstream stream;
	/* Recorded after each copy; waiting on it sleeps (BLOCKING_SYNC)
	 * rather than spins, which leaves the CPUs to the other workers'
	 * reads. */
	CUevent done;
	bool busy; /* a copy was queued and not yet waited for */
	uint32_t obj;
	uint64_t off;
	size_t len;
} slot;

static uint64_t chunks_of(uint64_t size)
{
	return (size + ENGINE_CHUNK - 1) / ENGINE_CHUNK;
}

/* Records a worker's error in p, unless an earlier one is there. */
static void pass_fail(pass *p, int e, const char *err)
{
	pthread_mutex_lock(&p->lock);
	int none = 0;
	if (atomic_compare_exchange_strong(&p->error, &none, e))
		snprintf(p->err, sizeof(p->err), "%s", *err ? err : strerror(-e));
	pthread_mutex_unlock(&p->lock);
}

/* Waits for s's copy, if one is queued. */
static int settle(slot *s, const char *what, char *err, size_t errlen)
{
	if (!s->busy)
		return 0;
	s->busy = false;
	CUresult r = cu.cuEventSynchronize(s->done);
	return r ? driver_fail(r, err, errlen, what) : 0;
}

/* Copy in: reads the chunk from the image and queues it to the device. */
static int fill(engine_filler *f, slot *s, const mapping *m, char *err, size_t errlen)
{
	int e = phosimg_read(f->img, s->obj, s->off, s->buf, s->len);
	if (e)
		return engine_fail(e, err, errlen, "reading the image: %s",
				   *phosimg_last_error() ? phosimg_last_error() : strerror(-e));
	CUresult r = cu.cuMemcpyHtoDAsync(m->va + s->off, s->buf, s->len, s->stream);
	if (!r && (r = cu.cuEventRecord(s->done, s->stream)) != CUDA_SUCCESS)
		cu.cuStreamSynchronize(s->stream); /* the copy queued must end before its buffer is used again */
	if (r)
		return driver_fail(r, err, errlen, "copying the image to the device");
	s->busy = true;
	if (f->prog)
		atomic_fetch_add(&f->prog->done, s->len);
	return 0;
}

/* Takes chunks of pass p until none are left or it failed, through the
 * slots of p's device (made at first use). */
static void run(engine_filler *f, pass *p, slot *s)
{
	char err[ENGINE_ERR_MAX] = "";
	int e = driver_use(p->device, err, sizeof(err));
	for (int i = 0; i < NBUF && !e; i++) {
		CUresult r = s[i].buf ? CUDA_SUCCESS : cu.cuMemAllocHost(&s[i].buf, ENGINE_CHUNK);
		if (!r && !s[i].stream)
			r = cu.cuStreamCreate(&s[i].stream, CU_STREAM_NON_BLOCKING);
		if (!r && !s[i].done)
			r = cu.cuEventCreate(&s[i].done, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING);
		if (r)
			e = driver_fail(r, err, sizeof(err), "making pinned staging");
	}
	uint64_t total = p->first[p->n];
	for (uint64_t k = 0; !e && !atomic_load(&p->error); k++) {
		slot *sl = &s[k % NBUF];
		e = settle(sl, "copying the image to the device", err, sizeof(err));
		if (e)
			break;
		if (f->prog && atomic_load(&f->prog->cancel)) {
			e = engine_fail(-ECANCELED, err, sizeof(err), "cancelled");
			break;
		}
		uint64_t g = atomic_fetch_add(&p->next, 1);
		if (g >= total)
			break;
		int i = mapping_owner(p->first, p->n, g);
		const mapping *m = &p->maps[p->objs[i]];
		sl->obj = p->ids[p->objs[i]];
		sl->off = (g - p->first[i]) * ENGINE_CHUNK;
		sl->len = m->len - sl->off < ENGINE_CHUNK ? (size_t)(m->len - sl->off) : ENGINE_CHUNK;
		e = fill(f, sl, m, err, sizeof(err));
	}
	for (int i = 0; i < NBUF; i++) {
		int de = settle(&s[i], "copying the image to the device", e ? NULL : err, sizeof(err));
		e = e ? e : de;
	}
	if (e)
		pass_fail(p, e, err);
}

/* A worker: runs each pass the filler starts, until it stops. */
static void *worker(void *arg)
{
	engine_filler *f = arg;
	slot s[PHOSIMG_DEVICES_MAX][NBUF];
	memset(s, 0, sizeof(s));
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
		if (p->device >= 0 && p->device < PHOSIMG_DEVICES_MAX)
			run(f, p, s[p->device]);
		else
			pass_fail(p, -EINVAL, "a device out of range");
		pthread_mutex_lock(&f->lock);
		if (--f->busy == 0)
			pthread_cond_broadcast(&f->idle);
		pthread_mutex_unlock(&f->lock);
	}
	for (int d = 0; d < PHOSIMG_DEVICES_MAX; d++) {
		bool made = false;
		for (int i = 0; i < NBUF; i++)
			made = made || s[d][i].buf || s[d][i].stream || s[d][i].done;
		if (!made)
			continue;
		driver_use(d, NULL, 0);
		for (int i = 0; i < NBUF; i++) {
			if (s[d][i].done)
				cu.cuEventDestroy(s[d][i].done);
			if (s[d][i].stream)
				cu.cuStreamDestroy(s[d][i].stream);
			if (s[d][i].buf)
				cu.cuMemFreeHost(s[d][i].buf);
		}
	}
	return NULL;
}

int engine_filler_start(phosimg *img, int threads, engine_progress *prog, engine_filler **out, char *err,
			size_t errlen)
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
		return engine_fail(-ENOMEM, err, errlen, "out of memory");
	f->img = img;
	f->prog = prog;
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->go, NULL);
	pthread_cond_init(&f->idle, NULL);
	for (; f->nth < threads; f->nth++) {
		int pe = pthread_create(&f->th[f->nth], NULL, worker, f);
		if (pe) {
			engine_filler_stop(f);
			return engine_fail(-pe, err, errlen, "cannot start a copy thread: %s", strerror(pe));
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
static int run_pass(engine_filler *f, pass *p, char *err, size_t errlen)
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
	return e ? engine_fail(e, err, errlen, "%s", p->err) : 0;
}

/* Fills every mapping (all of them already made) from the image, one
 * device at a time. */
static int run_passes(engine_filler *f, const mapping *maps, const uint32_t *ids, int n, char *err, size_t errlen)
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
			first[p.n + 1] = first[p.n] + chunks_of(maps[j].len);
			p.n++;
		}
		e = run_pass(f, &p, err, errlen);
	}
	free(objs);
	free(first);
	free(done);
	return e;
}

/* Makes one allocation of at least size bytes on dev, exportable as an fd. */
static int create(mapping *m, uint64_t size, int dev, char *err, size_t errlen)
{
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
				     .location = { CU_MEM_LOCATION_TYPE_DEVICE, dev } };
	size_t gran = 0;
	CUresult r = cu.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (r || !gran)
		return driver_fail(r, err, errlen, "asking the allocation granularity");
	size_t bytes = (size + gran - 1) / gran * gran;
	CUmemGenericAllocationHandle h;
	r = cu.cuMemCreate(&h, bytes, &prop, 0);
	if (r)
		return driver_fail(r, err, errlen, "allocating device memory");
	return mapping_map(m, h, bytes, dev, err, errlen);
}

/* The record of image object o, as its tracer knows it. */
static wire_object record_of(const phosimg_object *o)
{
	bool app = o->flags & PHOSIMG_OBJ_APP_VMM;
	return (wire_object){ .key = app ? o->key : o->va, .va = o->va, .size = o->size, .device = o->device,
			      .flags = app ? WIRE_OBJ_APP : 0 };
}

/* Exports m's memory as an fd (its device's context current). */
static int export(const mapping *m, int *fd, char *err, size_t errlen)
{
	*fd = -1;
	int e = driver_use(m->device, err, errlen);
	CUresult r = e ? CUDA_SUCCESS : cu.cuMemExportToShareableHandle(fd, m->h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	return e ? e : r ? driver_fail(r, err, errlen, "exporting device memory") : 0;
}

int engine_copy_in(phosimg *img, const engine_devmap *map, const bool *sel, int threads, engine_parked *out,
		   engine_progress *prog, char *err, size_t errlen)
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
		engine_fail(e, err, errlen, "out of memory");
	out->cap = n;
	for (int k = 0, i = 0; k < all && !e; k++) {
		if (sel && !sel[k])
			continue;
		const phosimg_object *o = &in->objects[k];
		ids[i] = (uint32_t)k;
		int dev = engine_devmap_to(map, o->device);
		e = driver_use(dev, err, errlen);
		if (!e)
			e = create(&maps[i], o->size, dev, err, errlen);
		/* The object's bytes, not the rounded-up allocation's. */
		maps[i++].len = o->size;
	}
	engine_filler *f = NULL;
	if (!e && n)
		e = engine_filler_start(img, threads, prog, &f, err, errlen);
	if (!e && n)
		e = run_passes(f, maps, ids, n, err, errlen);
	engine_filler_stop(f);
	for (int i = 0; i < n && !e; i++) {
		const phosimg_object *o = &in->objects[ids[i]];
		int fd;
		e = export(&maps[i], &fd, err, errlen);
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

int engine_fill_object(engine_filler *f, uint32_t k, int dev, wire_object *rec, int *fd, char *err, size_t errlen)
{
	const phosimg_info *in = phosimg_get_info(f->img);
	*fd = -1;
	if (k >= in->object_count)
		return engine_fail(-EINVAL, err, errlen, "no object %u in the image", k);
	const phosimg_object *o = &in->objects[k];
	mapping m = { 0 };
	int e = driver_use(dev, err, errlen);
	if (!e)
		e = create(&m, o->size, dev, err, errlen);
	m.len = o->size;
	int idx = 0;
	uint64_t first[2] = { 0, chunks_of(o->size) };
	pass p = { .device = dev, .maps = &m, .ids = &k, .objs = &idx, .first = first, .n = 1 };
	if (!e)
		e = run_pass(f, &p, err, errlen);
	if (!e)
		e = export(&m, fd, err, errlen);
	if (!e)
		*rec = record_of(o);
	mapping_unmap_all(&m, 1);
	return e;
}
