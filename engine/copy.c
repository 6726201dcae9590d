/*
 * Device memory to images and back. phosfs maps the process's memory
 * objects in its own context and moves them in ENGINE_CHUNK pieces through
 * pinned staging buffers, each with its own stream, so that up to
 * NSTAGE copies are in flight while the image is written or read.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver.h"

#define NSTAGE 4

/* One object mapped in phosfs's context. */
typedef struct mapping {
	CUdeviceptr va;
	size_t size;
	CUmemGenericAllocationHandle h;
} mapping;

/* Pinned buffers and their streams, for one device. */
typedef struct staging {
	int device;
	void *buf[NSTAGE];
	CUstream stream[NSTAGE];
	/* What each slot holds until it is drained (copy out) or done. */
	bool busy[NSTAGE];
	uint32_t obj[NSTAGE];
	uint64_t off[NSTAGE];
	size_t len[NSTAGE];
} staging;

static void staging_free(staging *s)
{
	for (int i = 0; i < NSTAGE; i++) {
		if (s->stream[i]) {
			cu.cuStreamSynchronize(s->stream[i]);
			cu.cuStreamDestroy(s->stream[i]);
		}
		if (s->buf[i])
			cu.cuMemFreeHost(s->buf[i]);
	}
	memset(s, 0, sizeof(*s));
	s->device = -1;
}

/* Readies staging on device dev (after the previous device's is drained). */
static int staging_use(staging *s, int dev, char *err, size_t errlen)
{
	if (s->device == dev)
		return 0;
	staging_free(s);
	int e = driver_use(dev, err, errlen);
	if (e)
		return e;
	s->device = dev;
	for (int i = 0; i < NSTAGE; i++) {
		CUresult r = cu.cuMemAllocHost(&s->buf[i], ENGINE_CHUNK);
		if (!r)
			r = cu.cuStreamCreate(&s->stream[i], CU_STREAM_NON_BLOCKING);
		if (r)
			return driver_fail(r, err, errlen, "making pinned staging");
	}
	return 0;
}

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

/* Maps handle h of size bytes on device dev at a new address. */
static int map(mapping *m, CUmemGenericAllocationHandle h, size_t size, int dev, char *err, size_t errlen)
{
	m->h = h;
	m->size = size;
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

/* Waits for slot i's copy, if one is in flight. */
static int settle(staging *s, int i, const char *what, char *err, size_t errlen)
{
	if (!s->busy[i])
		return 0;
	s->busy[i] = false;
	CUresult r = cu.cuStreamSynchronize(s->stream[i]);
	return r ? driver_fail(r, err, errlen, what) : 0;
}

/* Writes the chunk in slot i into the image. */
static int drain(staging *s, int i, phosimg_writer *w, engine_progress *prog, char *err, size_t errlen)
{
	if (!s->busy[i])
		return 0;
	int e = settle(s, i, "copying device memory to the host", err, errlen);
	if (e)
		return e;
	e = phosimg_writer_put(w, s->obj[i], s->off[i], s->buf[i], s->len[i]);
	if (e)
		return engine_fail(e, err, errlen, "writing the image: %s",
				   *phosimg_last_error() ? phosimg_last_error() : strerror(-e));
	if (prog)
		atomic_fetch_add(&prog->done, s->len[i]);
	return 0;
}

int engine_copy_out(const engine_parked *objs, phosimg_writer *w, engine_progress *prog, char *err, size_t errlen)
{
	staging s = { .device = -1 };
	mapping *maps = calloc(objs->n ? (size_t)objs->n : 1, sizeof(*maps));
	if (!maps)
		return -ENOMEM;
	int e = 0;
	uint64_t slot = 0;
	for (int k = 0; k < objs->n && !e; k++) {
		const wire_object *o = &objs->objs[k];
		phosimg_object io = { .device = o->device, .va = o->va, .size = o->size };
		if (o->flags & WIRE_OBJ_APP) {
			io.flags = PHOSIMG_OBJ_APP_VMM;
			io.key = (uint32_t)o->key;
		}
		uint32_t id;
		e = phosimg_writer_add_object(w, &io, &id);
		if (e) {
			engine_fail(e, err, errlen, "adding an object to the image: %s", strerror(-e));
			break;
		}
		if (s.device != (int)o->device) {
			for (int i = 0; i < NSTAGE && !e; i++)
				e = drain(&s, i, w, prog, err, errlen);
			if (!e)
				e = staging_use(&s, (int)o->device, err, errlen);
			if (e)
				break;
		}
		CUmemGenericAllocationHandle h;
		CUresult r = cu.cuMemImportFromShareableHandle(&h, (void *)(intptr_t)objs->fds[k],
							       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
		if (r) {
			e = driver_fail(r, err, errlen, "importing the process's device memory");
			break;
		}
		e = map(&maps[k], h, o->size, (int)o->device, err, errlen);
		for (uint64_t c = 0; c < chunks_of(o->size) && !e; c++, slot++) {
			if (prog && atomic_load(&prog->cancel)) {
				e = engine_fail(-ECANCELED, err, errlen, "cancelled");
				break;
			}
			int i = (int)(slot % NSTAGE);
			e = drain(&s, i, w, prog, err, errlen);
			if (e)
				break;
			uint64_t off = c * ENGINE_CHUNK;
			size_t len = o->size - off < ENGINE_CHUNK ? (size_t)(o->size - off) : ENGINE_CHUNK;
			r = cu.cuMemcpyDtoHAsync(s.buf[i], maps[k].va + off, len, s.stream[i]);
			if (r) {
				e = driver_fail(r, err, errlen, "copying device memory to the host");
				break;
			}
			s.busy[i] = true;
			s.obj[i] = id;
			s.off[i] = off;
			s.len[i] = len;
		}
	}
	for (int i = 0; i < NSTAGE && !e; i++)
		e = drain(&s, (int)((slot + (uint64_t)i) % NSTAGE), w, prog, err, errlen);
	staging_free(&s);
	for (int k = 0; k < objs->n; k++)
		unmap(&maps[k]);
	free(maps);
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
	if (!out->objs || !out->fds) {
		engine_parked_free(out);
		return -ENOMEM;
	}
	out->cap = n;
	staging s = { .device = -1 };
	int e = 0;
	uint64_t slot = 0;
	for (int k = 0; k < n && !e; k++) {
		const phosimg_object *o = &in->objects[k];
		e = staging_use(&s, (int)o->device, err, errlen);
		mapping m = { 0 };
		if (!e)
			e = create(&m, o->size, (int)o->device, err, errlen);
		for (uint64_t c = 0; c < chunks_of(o->size) && !e; c++, slot++) {
			int i = (int)(slot % NSTAGE);
			e = settle(&s, i, "copying the image to the device", err, errlen);
			uint64_t off = c * ENGINE_CHUNK;
			size_t len = o->size - off < ENGINE_CHUNK ? (size_t)(o->size - off) : ENGINE_CHUNK;
			if (!e) {
				e = phosimg_read(img, (uint32_t)k, off, s.buf[i], len);
				if (e)
					engine_fail(e, err, errlen, "reading the image: %s",
						    *phosimg_last_error() ? phosimg_last_error() : strerror(-e));
			}
			if (!e) {
				CUresult r = cu.cuMemcpyHtoDAsync(m.va + off, s.buf[i], len, s.stream[i]);
				if (r)
					e = driver_fail(r, err, errlen, "copying the image to the device");
				s.busy[i] = !r;
			}
			if (!e && prog)
				atomic_fetch_add(&prog->done, len);
		}
		for (int i = 0; i < NSTAGE; i++) {
			int se = settle(&s, i, "copying the image to the device", e ? NULL : err, errlen);
			e = e ? e : se;
		}
		int fd = -1;
		if (!e) {
			CUresult r = cu.cuMemExportToShareableHandle(&fd, m.h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
			if (r)
				e = driver_fail(r, err, errlen, "exporting device memory");
		}
		/* The fd keeps the memory; phosfs's mapping and handle go. */
		unmap(&m);
		if (e)
			break;
		bool app = o->flags & PHOSIMG_OBJ_APP_VMM;
		out->objs[k] = (wire_object){ .key = app ? o->key : o->va, .va = o->va, .size = o->size,
					      .device = o->device, .flags = app ? WIRE_OBJ_APP : 0 };
		out->fds[k] = fd;
		out->n = k + 1;
	}
	staging_free(&s);
	if (e)
		engine_parked_free(out);
	return e;
}
