/*
 * Device memory to images and back. phosfs maps the process's memory
 * objects in its own context. Then, one device at a time, COPY_WORKERS
 * threads take ENGINE_CHUNK pieces from a shared cursor; each moves its
 * pieces through NBUF pinned buffers of its own, a stream each, so that
 * one piece is on the bus while another is written to (or read from) the
 * image. The image writer and reader are safe from several threads and
 * take chunks in any order, so hashing, writing and reading run on every
 * worker at once.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver.h"

#define COPY_WORKERS 4
#define NBUF 2

/* One object mapped in phosfs's context. */
typedef struct mapping {
	CUdeviceptr va;
	size_t size; /* mapped */
	uint64_t len; /* copied: the object's size, up to size */
	CUmemGenericAllocationHandle h;
	int device;
} mapping;

/* One device's share of a copy, which its workers take chunks from. */
typedef struct pass {
	int device;
	phosimg_writer *w; /* copy out: the image written */
	phosimg *img;      /* copy in: the image read */
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

static void unmap(mapping *m)
{
	if (m->va) {
		cu.cuMemUnmap(m->va, m->size);
		cu.cuMemAddressFree(m->va, m->size);
	}
	if (m->h)
		cu.cuMemRelease(m->h);
	memset(m, 0, sizeof(*m));
}

/* Unmaps every mapping, each with its device's context current. */
static void unmap_all(mapping *maps, int n)
{
	for (int k = 0; k < n; k++) {
		if (maps[k].va || maps[k].h)
			driver_use(maps[k].device, NULL, 0);
		unmap(&maps[k]);
	}
}

/* Maps handle h of size bytes on device dev at a new address. */
static int map(mapping *m, CUmemGenericAllocationHandle h, size_t size, int dev, char *err, size_t errlen)
{
	m->h = h;
	m->size = size;
	m->len = size;
	m->device = dev;
	CUresult r = cu.cuMemAddressReserve(&m->va, size, 0, 0, 0);
	if (r) {
		m->va = 0;
		return driver_fail(r, err, errlen, "reserving an address range");
	}
	r = cu.cuMemMap(m->va, size, 0, h, 0);
	if (r) {
		cu.cuMemAddressFree(m->va, size);
		m->va = 0;
		return driver_fail(r, err, errlen, "mapping device memory");
	}
	CUmemAccessDesc acc = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, dev },
				.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	r = cu.cuMemSetAccess(m->va, size, &acc, 1);
	return r ? driver_fail(r, err, errlen, "setting access to device memory") : 0;
}

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

/* Copy out: writes the chunk in s into the image once it is on the host. */
static int drain(pass *p, slot *s, char *err, size_t errlen)
{
	if (!s->busy)
		return 0;
	int e = settle(s, "copying device memory to the host", err, errlen);
	if (e)
		return e;
	e = phosimg_writer_put(p->w, s->obj, s->off, s->buf, s->len);
	if (e)
		return engine_fail(e, err, errlen, "writing the image: %s",
				   *phosimg_last_error() ? phosimg_last_error() : strerror(-e));
	if (p->prog) {
		atomic_fetch_add(&p->prog->done, s->len);
		/* Puts finish out of order: the largest value seen wins. */
		uint64_t ready = phosimg_writer_data_ready(p->w), was = atomic_load(&p->prog->data_ready);
		while (was < ready && !atomic_compare_exchange_weak(&p->prog->data_ready, &was, ready))
			;
	}
	return 0;
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

/* The object (index into p->objs) that holds the pass's chunk g. */
static int locate(const pass *p, uint64_t g)
{
	int lo = 0, hi = p->n - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;
		if (p->first[mid] <= g)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* Takes chunks until none are left or the pass failed. */
static void *worker(void *arg)
{
	pass *p = arg;
	bool out = p->w != NULL;
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
		e = out ? drain(p, sl, err, sizeof(err))
			: settle(sl, "copying the image to the device", err, sizeof(err));
		if (e)
			break;
		if (p->prog && atomic_load(&p->prog->cancel)) {
			e = engine_fail(-ECANCELED, err, sizeof(err), "cancelled");
			break;
		}
		uint64_t g = atomic_fetch_add(&p->next, 1);
		if (g >= total)
			break;
		int i = locate(p, g);
		const mapping *m = &p->maps[p->objs[i]];
		sl->obj = p->ids[p->objs[i]];
		sl->off = (g - p->first[i]) * ENGINE_CHUNK;
		sl->len = m->len - sl->off < ENGINE_CHUNK ? (size_t)(m->len - sl->off) : ENGINE_CHUNK;
		if (out) {
			CUresult r = cu.cuMemcpyDtoHAsync(sl->buf, m->va + sl->off, sl->len, sl->stream);
			if (r)
				e = driver_fail(r, err, sizeof(err), "copying device memory to the host");
			sl->busy = !r;
		} else {
			e = fill(p, sl, m, err, sizeof(err));
		}
	}
	for (int i = 0; i < NBUF; i++) {
		/* After an error the queued copies are only waited for. */
		int de = out && !e && !atomic_load(&p->error)
				 ? drain(p, &s[i], err, sizeof(err))
				 : settle(&s[i], "copying device memory", e ? NULL : err, sizeof(err));
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

/* Copies every chunk of the mappings (all of them already mapped), one
 * device at a time, with the workers. In for copy in (from img), out for
 * copy out (into w). */
static int run_passes(const mapping *maps, const uint32_t *ids, int n, phosimg_writer *w, phosimg *img,
		      engine_progress *prog, char *err, size_t errlen)
{
	int *objs = calloc(n ? (size_t)n : 1, sizeof(*objs));
	uint64_t *first = calloc((size_t)n + 1, sizeof(*first));
	bool *done = calloc(n ? (size_t)n : 1, sizeof(*done));
	int e = objs && first && done ? 0 : -ENOMEM;
	for (int k = 0; k < n && !e; k++) {
		if (done[k])
			continue;
		pass p = { .device = maps[k].device, .w = w, .img = img, .maps = maps, .ids = ids,
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

int engine_copy_out(const engine_parked *objs, phosimg_writer *w, engine_progress *prog, char *err, size_t errlen)
{
	int n = objs->n;
	mapping *maps = calloc(n ? (size_t)n : 1, sizeof(*maps));
	uint32_t *ids = calloc(n ? (size_t)n : 1, sizeof(*ids));
	int e = maps && ids ? 0 : -ENOMEM;
	for (int k = 0; k < n && !e; k++) {
		const wire_object *o = &objs->objs[k];
		phosimg_object io = { .device = o->device, .va = o->va, .size = o->size, .pid = objs->pids[k] };
		if (o->flags & WIRE_OBJ_APP) {
			io.flags = PHOSIMG_OBJ_APP_VMM;
			io.key = (uint32_t)o->key;
		}
		e = phosimg_writer_add_object(w, &io, &ids[k]);
		if (e) {
			engine_fail(e, err, errlen, "adding an object to the image: %s", strerror(-e));
			break;
		}
		e = driver_use((int)o->device, err, errlen);
		if (e)
			break;
		CUmemGenericAllocationHandle h;
		CUresult r = cu.cuMemImportFromShareableHandle(&h, (void *)(intptr_t)objs->fds[k],
							       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
		if (r) {
			e = driver_fail(r, err, errlen, "importing the process's device memory");
			break;
		}
		e = map(&maps[k], h, o->size, (int)o->device, err, errlen);
	}
	if (!e)
		e = run_passes(maps, ids, n, w, NULL, prog, err, errlen);
	if (maps)
		unmap_all(maps, n);
	free(maps);
	free(ids);
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
	return map(m, h, bytes, dev, err, errlen);
}

int engine_copy_in(phosimg *img, engine_parked *out, engine_progress *prog, char *err, size_t errlen)
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
		e = driver_use((int)o->device, err, errlen);
		if (!e)
			e = create(&maps[k], o->size, (int)o->device, err, errlen);
		/* The object's bytes, not the rounded-up allocation's. */
		maps[k].len = o->size;
	}
	if (!e)
		e = run_passes(maps, ids, n, NULL, img, prog, err, errlen);
	for (int k = 0; k < n && !e; k++) {
		const phosimg_object *o = &in->objects[k];
		int fd = -1;
		e = driver_use((int)o->device, err, errlen);
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
		unmap_all(maps, n);
	free(maps);
	free(ids);
	if (e)
		engine_parked_free(out);
	return e;
}
