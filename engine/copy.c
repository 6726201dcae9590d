/*
 * Images back to device memory (the fill of a restore). The job makes
 * new allocations in its own context. Then, one device at a time,
 * COPY_WORKERS threads take chunks from a shared cursor; each moves its
 * chunks through NBUF pinned buffers of its own, a stream each, so that
 * one chunk is on the bus while the next is read from the image. The
 * reader is safe from several threads, so reading and checking run on
 * every worker at once. (The copy out is copy-out.c.)
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mapping.h"

#define COPY_WORKERS 4
#define NBUF 2

/* One device's share of a copy, which its workers take chunks from. */
typedef struct pass {
	int device;
	phosimg *img; /* the image read */
	const mapping *maps;
	const uint32_t *ids; /* the image's object id of each mapping */
	int *objs;           /* this device's objects: indices into maps */
	uint64_t *first;     /* first[i]: chunks before objs[i]; first[n]: all */
	int n;
	engine_progress *prog;
	_Atomic uint64_t next; /* the next chunk to take */
	_Atomic int error;     /* the first error; the workers stop at it */
	pthread_mutex_t lock;  /* guards err */
	char err[ENGINE_ERR_MAX];
} pass;

/* A pinned buffer, its stream and the chunk it holds. */
typedef struct slot {
	void *buf;
	CUstream stream;
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
	CUresult r = cu.cuStreamSynchronize(s->stream);
	return r ? driver_fail(r, err, errlen, what) : 0;
}

/* Copy in: reads the chunk from the image and queues it to the device. */
static int fill(pass *p, slot *s, const mapping *m, char *err, size_t errlen)
{
	int e = phosimg_read(p->img, s->obj, s->off, s->buf, s->len);
	if (e)
		return engine_fail(e, err, errlen, "reading the image: %s",
				   *phosimg_last_error() ? phosimg_last_error() : strerror(-e));
	CUresult r = cu.cuMemcpyHtoDAsync(m->va + s->off, s->buf, s->len, s->stream);
	if (r)
		return driver_fail(r, err, errlen, "copying the image to the device");
	s->busy = true;
	if (p->prog)
		atomic_fetch_add(&p->prog->done, s->len);
	return 0;
}

/* Takes chunks until none are left or the pass failed. */
static void *worker(void *arg)
{
	pass *p = arg;
	char err[ENGINE_ERR_MAX] = "";
	slot s[NBUF] = { 0 };
	int e = driver_use(p->device, err, sizeof(err));
	for (int i = 0; i < NBUF && !e; i++) {
		CUresult r = cu.cuMemAllocHost(&s[i].buf, ENGINE_CHUNK);
		if (!r)
			r = cu.cuStreamCreate(&s[i].stream, CU_STREAM_NON_BLOCKING);
		if (r)
			e = driver_fail(r, err, sizeof(err), "making pinned staging");
	}
	uint64_t total = p->first[p->n];
	for (uint64_t k = 0; !e && !atomic_load(&p->error); k++) {
		slot *sl = &s[k % NBUF];
		e = settle(sl, "copying the image to the device", err, sizeof(err));
		if (e)
			break;
		if (p->prog && atomic_load(&p->prog->cancel)) {
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
		e = fill(p, sl, m, err, sizeof(err));
	}
	for (int i = 0; i < NBUF; i++) {
		int de = settle(&s[i], "copying the image to the device", e ? NULL : err, sizeof(err));
		e = e ? e : de;
	}
	for (int i = 0; i < NBUF; i++) {
		if (s[i].stream)
			cu.cuStreamDestroy(s[i].stream);
		if (s[i].buf)
			cu.cuMemFreeHost(s[i].buf);
	}
	if (e)
		pass_fail(p, e, err);
	return NULL;
}

/* Fills every mapping (all of them already made) from img, one device at
 * a time, with the workers. */
static int run_passes(const mapping *maps, const uint32_t *ids, int n, phosimg *img, engine_progress *prog,
		      char *err, size_t errlen)
{
	int *objs = calloc(n ? (size_t)n : 1, sizeof(*objs));
	uint64_t *first = calloc((size_t)n + 1, sizeof(*first));
	bool *done = calloc(n ? (size_t)n : 1, sizeof(*done));
	int e = objs && first && done ? 0 : -ENOMEM;
	for (int k = 0; k < n && !e; k++) {
		if (done[k])
			continue;
		pass p = { .device = maps[k].device, .img = img, .maps = maps, .ids = ids,
			   .objs = objs, .first = first, .prog = prog };
		for (int j = k; j < n; j++) {
			if (done[j] || maps[j].device != p.device)
				continue;
			done[j] = true;
			objs[p.n] = j;
			first[p.n + 1] = first[p.n] + chunks_of(maps[j].len);
			p.n++;
		}
		pthread_mutex_init(&p.lock, NULL);
		pthread_t th[COPY_WORKERS];
		int started = 0;
		uint64_t want = first[p.n] < COPY_WORKERS ? first[p.n] : COPY_WORKERS;
		for (; started < (int)want; started++) {
			int pe = pthread_create(&th[started], NULL, worker, &p);
			if (pe) {
				pass_fail(&p, -pe, "cannot start a copy thread");
				break;
			}
		}
		for (int i = 0; i < started; i++)
			pthread_join(th[i], NULL);
		pthread_mutex_destroy(&p.lock);
		e = atomic_load(&p.error);
		if (e)
			engine_fail(e, err, errlen, "%s", p.err);
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

int engine_copy_in(phosimg *img, const engine_devmap *map, engine_parked *out, engine_progress *prog, char *err,
		   size_t errlen)
{
	const phosimg_info *in = phosimg_get_info(img);
	memset(out, 0, sizeof(*out));
	int n = (int)in->object_count;
	out->objs = calloc(n ? (size_t)n : 1, sizeof(*out->objs));
	out->fds = calloc(n ? (size_t)n : 1, sizeof(*out->fds));
	out->pids = calloc(n ? (size_t)n : 1, sizeof(*out->pids));
	mapping *maps = calloc(n ? (size_t)n : 1, sizeof(*maps));
	uint32_t *ids = calloc(n ? (size_t)n : 1, sizeof(*ids));
	int e = out->objs && out->fds && out->pids && maps && ids ? 0 : -ENOMEM;
	out->cap = n;
	for (int k = 0; k < n && !e; k++) {
		const phosimg_object *o = &in->objects[k];
		ids[k] = (uint32_t)k;
		int dev = engine_devmap_to(map, o->device);
		e = driver_use(dev, err, errlen);
		if (!e)
			e = create(&maps[k], o->size, dev, err, errlen);
		/* The object's bytes, not the rounded-up allocation's. */
		maps[k].len = o->size;
	}
	if (!e)
		e = run_passes(maps, ids, n, img, prog, err, errlen);
	for (int k = 0; k < n && !e; k++) {
		const phosimg_object *o = &in->objects[k];
		int fd = -1;
		e = driver_use(engine_devmap_to(map, o->device), err, errlen);
		CUresult r = e ? CUDA_SUCCESS
			       : cu.cuMemExportToShareableHandle(&fd, maps[k].h,
								 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
		if (r)
			e = driver_fail(r, err, errlen, "exporting device memory");
		if (e)
			break;
		bool app = o->flags & PHOSIMG_OBJ_APP_VMM;
		out->objs[k] = (wire_object){ .key = app ? o->key : o->va, .va = o->va, .size = o->size,
					      .device = o->device, .flags = app ? WIRE_OBJ_APP : 0 };
		out->fds[k] = fd;
		out->pids[k] = o->pid;
		out->n = k + 1;
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
