/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The job's side of a copy-on-write checkpoint (common/cow.h): one table
 * per traced process, and its shadow pool, made during the stall, sent to
 * the tracer at unpark, read by the copier while the process runs, and
 * ended when every t1 byte is off the GPU (or the copy failed).
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cow.h"
#include "driver-api.h"

/* Makes the pool: device memory the tracer imports and this job maps;
 * want bytes at most, and, if fit, no more than the device's free memory
 * less engine_shadow_reserve. */
static int make_pool(engine_cow_member *m, uint64_t want, bool fit, uint32_t chunk, perr *er)
{
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
				     .location = { CU_MEM_LOCATION_TYPE_DEVICE, (int)m->pool_device } };
	size_t gran = 0;
	CUresult r = cu.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (r || !gran)
		return driver_fail(r ? r : CUDA_ERROR_UNKNOWN, er, "asking the allocation granularity");
	int e = driver_use((int)m->pool_device, er);
	if (e)
		return e;
	size_t free_b = 0, total = 0;
	if (fit && cu.cuMemGetInfo(&free_b, &total) == CUDA_SUCCESS) {
		uint64_t reserve = engine_shadow_reserve(total);
		uint64_t room = free_b > reserve ? free_b - reserve : 0;
		want = want < room ? want : room / gran * gran;
	}
	/* A GPU that is nearly full gets a smaller pool, or none. */
	uint64_t bytes = (want + gran - 1) / gran * gran;
	while (bytes >= gran && bytes >= chunk) {
		CUmemGenericAllocationHandle h;
		if (cu.cuMemCreate(&h, bytes, &prop, 0) == CUDA_SUCCESS) {
			m->pool_h = h;
			m->pool_bytes = bytes;
			break;
		}
		uint64_t next = bytes / 2 / gran * gran;
		if (next == bytes)
			break;
		bytes = next;
	}
	if (!m->pool_bytes)
		return 0;
	CUmemAccessDesc acc = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, (int)m->pool_device },
				.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	int fd = -1;
	r = cu.cuMemExportToShareableHandle(&fd, m->pool_h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	CUdeviceptr va = 0;
	if (!r)
		r = cu.cuMemAddressReserve(&va, m->pool_bytes, 0, 0, 0);
	m->pool_va = va;
	if (!r)
		r = cu.cuMemMap(m->pool_va, m->pool_bytes, 0, m->pool_h, 0);
	if (!r)
		r = cu.cuMemSetAccess(m->pool_va, m->pool_bytes, &acc, 1);
	m->pool_fd = fd;
	return r ? driver_fail(r, er, "making the CoW shadow pool") : 0;
}

static int by_va(const void *a, const void *b, void *arg)
{
	const wire_object *o = arg;
	uint64_t x = o[*(const int *)a].va, y = o[*(const int *)b].va;
	return x < y ? -1 : x > y;
}

/* The table of one process: its objects are all[from, from+n). */
static int make_table(engine_cow *c, engine_cow_member *m, const engine_parked *all, int from, int n, uint32_t chunk,
		      uint64_t pool, uint32_t mode, perr *er)
{
	int *idx = calloc((size_t)n, sizeof(*idx));
	if (!idx)
		return pr_err(er, -ENOMEM, "out of memory");
	uint64_t nchunks = 0, bytes = 0, dev_bytes[PHOSIMG_DEVICES_MAX] = { 0 };
	for (int i = 0; i < n; i++) {
		const wire_object *o = &all->objs[from + i];
		idx[i] = from + i;
		nchunks += mode == COW_MODE_LAZY ? 1 : cow_chunks_of(o->size, chunk);
		bytes += o->size;
		if (o->device < PHOSIMG_DEVICES_MAX)
			dev_bytes[o->device] += o->size;
	}
	qsort_r(idx, (size_t)n, sizeof(*idx), by_va, all->objs);
	for (uint32_t d = 1; d < PHOSIMG_DEVICES_MAX; d++)
		if (dev_bytes[d] > dev_bytes[m->pool_device])
			m->pool_device = d;
	m->pool_fd = -1;
	uint64_t on_dev = dev_bytes[m->pool_device];
	int e = !pool				 ? 0
		: pool == ENGINE_SHADOW_POOL_AUTO ? make_pool(m, on_dev, true, chunk, er)
						 : make_pool(m, pool < bytes ? pool : bytes, false, chunk, er);
	uint32_t nslots = (uint32_t)(m->pool_bytes / chunk);
	m->bytes = cow_table_bytes((uint32_t)n, nchunks, nslots);
	m->fd = e ? -1 : memfd_create("phos-cow", MFD_CLOEXEC);
	if (!e && m->fd < 0)
		e = pr_perror(er, -errno, "cannot make the CoW table");
	void *p = MAP_FAILED;
	if (!e && (ftruncate(m->fd, (off_t)m->bytes) != 0 ||
		   (p = mmap(NULL, m->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0)) == MAP_FAILED))
		e = pr_perror(er, -errno, "cannot map the CoW table");
	if (e) {
		free(idx);
		return e;
	}
	cow_header *t = m->t = p;
	*t = (cow_header){ .magic = COW_MAGIC, .version = COW_VERSION, .pid = m->pid, .job = getpid(),
			   .nobjs = (uint32_t)n, .chunk = chunk, .nchunks = nchunks, .nslots = nslots,
			   .pool_device = m->pool_device, .pool_bytes = m->pool_bytes, .mode = mode };
	atomic_store(&t->active, 1);
	uint64_t first = 0;
	for (int i = 0; i < n; i++) {
		const wire_object *o = &all->objs[idx[i]];
		cow_object *co = &cow_objects(t)[i];
		co->va = o->va;
		co->size = o->size;
		co->first = first;
		co->device = o->device;
		/* Not mapped at t1 (the application's own handle): nothing
		 * writes it through an address the tracer could see. */
		if (!o->va)
			atomic_store(&co->freed, 1);
		c->table_of[idx[i]] = (int)(m - c->m);
		c->first_of[idx[i]] = first;
		first += mode == COW_MODE_LAZY ? 1 : cow_chunks_of(o->size, chunk);
	}
	free(idx);
	return 0;
}

int engine_cow_prepare(engine_cow *c, const engine_parked *all, uint32_t chunk, uint64_t pool, uint32_t mode,
		       perr *er)
{
	memset(c, 0, sizeof(*c));
	c->chunk = chunk;
	c->m = calloc(all->n ? (size_t)all->n : 1, sizeof(*c->m));
	c->table_of = calloc(all->n ? (size_t)all->n : 1, sizeof(*c->table_of));
	c->first_of = calloc(all->n ? (size_t)all->n : 1, sizeof(*c->first_of));
	if (!c->m || !c->table_of || !c->first_of) {
		engine_cow_free(c);
		return pr_err(er, -ENOMEM, "out of memory");
	}
	int e = 0;
	for (int from = 0; from < all->n && !e;) {
		int n = 1;
		while (from + n < all->n && all->pids[from + n] == all->pids[from])
			n++;
		engine_cow_member *m = &c->m[c->n++];
		m->pid = all->pids[from];
		e = make_table(c, m, all, from, n, chunk, pool, mode, er);
		from += n;
	}
	if (e)
		engine_cow_free(c);
	return e;
}

const engine_cow_member *engine_cow_of(const engine_cow *c, pid_t pid)
{
	for (int i = 0; c && i < c->n; i++)
		if (c->m[i].pid == pid)
			return &c->m[i];
	return NULL;
}

_Atomic uint32_t *engine_cow_chunk(const engine_cow *c, int k, uint64_t chunk, cow_header **t)
{
	*t = c->m[c->table_of[k]].t;
	return &cow_chunks(*t)[c->first_of[k] + chunk];
}

void engine_cow_wake(cow_header *t)
{
	atomic_fetch_add(&t->progress, 1);
	if (atomic_load(&t->waiters))
		cow_futex_wake(&t->progress);
}

void engine_cow_end(engine_cow *c)
{
	for (int i = 0; c && i < c->n; i++) {
		if (!c->m[i].t)
			continue;
		atomic_store(&c->m[i].t->active, 0);
		engine_cow_wake(c->m[i].t);
	}
}

void engine_cow_stats(const engine_cow *c, engine_progress *p)
{
	uint64_t v[6] = { 0 }, pools = 0;
	for (int i = 0; c && i < c->n; i++) {
		cow_header *t = c->m[i].t;
		if (!t)
			continue;
		pools += c->m[i].pool_bytes;
		v[0] += atomic_load(&t->shadows);
		v[1] += atomic_load(&t->shadow_bytes);
		v[2] += atomic_load(&t->waits);
		v[3] += atomic_load(&t->wait_ns);
		v[4] += atomic_load(&t->net_waits);
		v[5] += atomic_load(&t->net_wait_ns);
	}
	atomic_store(&p->shadows, v[0]);
	atomic_store(&p->shadow_bytes, v[1]);
	atomic_store(&p->waits, v[2]);
	atomic_store(&p->wait_ns, v[3]);
	atomic_store(&p->net_waits, v[4]);
	atomic_store(&p->net_wait_ns, v[5]);
	atomic_store(&p->shadow_pool_bytes, pools);
}

void engine_cow_free(engine_cow *c)
{
	engine_cow_end(c);
	for (int i = 0; c->m && i < c->n; i++) {
		engine_cow_member *m = &c->m[i];
		if (m->t)
			munmap(m->t, m->bytes);
		if (m->fd >= 0)
			close(m->fd);
		if (m->pool_fd >= 0)
			close(m->pool_fd);
		if (m->pool_va) {
			driver_use((int)m->pool_device, NULL);
			cu.cuMemUnmap(m->pool_va, m->pool_bytes);
			cu.cuMemAddressFree(m->pool_va, m->pool_bytes);
		}
		if (m->pool_h)
			cu.cuMemRelease(m->pool_h);
	}
	free(c->m);
	free(c->table_of);
	free(c->first_of);
	memset(c, 0, sizeof(*c));
}
