/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Device memory, made parkable. Every allocation the application asks for
 * becomes memory of a VMM allocation the tracer made with the POSIX fd
 * handle type (an "object"): a large request gets an object of its own,
 * rounded up to the allocation granularity; a small one gets a block of a
 * slab object that holds blocks of one power-of-two size, so that many
 * small allocations cost few VMM objects.
 *
 * To park, each object's handle is exported as an fd and handed to phosfs,
 * then unmapped and released; the VA reservation stays. To unpark, the same
 * fds come back and are mapped at the same VAs.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tracer.h"

#define SLAB_MIN 256u /* cudaMalloc's alignment */

typedef struct object {
	uint64_t va, size;
	CUdevice dev;
	CUmemGenericAllocationHandle h; /* 0 while parked */
	uint32_t block;   /* slab block size; 0 for a whole object */
	uint32_t used;    /* slab blocks in use */
	uint64_t *bitmap; /* slab blocks in use */
	/* The fd it came back with at the last unpark, plus 1 (0: none). A
	 * handle imported from an fd cannot be exported again on every
	 * driver, so the next park hands this fd over instead. */
	int kept;
	/* Its fd went to another process (a legacy IPC handle, ipc.c): kept
	 * is that very open file, which names the memory there, and parks
	 * marked WIRE_OBJ_EXPORTED. */
	bool shared;
	bool live;
} object;

#define NO_OBJECT UINT32_MAX /* a mapping of the application's own (vmm.c) */

typedef struct buffer {
	uint64_t va, size;
	uint32_t obj; /* or NO_OBJECT */
	uint32_t device;
	int slot; /* in the state table, or -1 */
	bool live;
	atomic_uint_fast64_t reads, writes;
	atomic_uint_fast64_t last; /* the use count at its last read or write; 0: none */
} buffer;

/*
 * Launches look buffers up without a lock: the sorted index is read under a
 * sequence count (a writer makes it odd while it changes the index), and a
 * reader that saw it change reads again. Memory a racing reader may still
 * look at is never freed: index arrays that grew are retired, and buffer
 * records live in blocks that never move.
 */
#define BLOCK_BUFS 4096
#define MAX_BLOCKS 4096

/* Guarded by lock (writers; readers of the launch path use `seq`): objs,
 * the buffer blocks, by_va, parked, stop_only, slab_hint, peers. */
static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static object *objs;
static uint32_t nobjs, objs_cap;
static buffer *blocks[MAX_BLOCKS];
static atomic_uint nbufs; /* published after the record is written */
static _Atomic(uint32_t *) by_va; /* live buffer ids sorted by va */
static atomic_uint nby_va;
static uint32_t by_va_cap;
static atomic_uint seq;
static atomic_uint_fast64_t uses; /* reads and writes counted so far */
/* Index arrays the index outgrew: a racing reader may still be in one, so
 * they are kept for the life of the process. Each is half the next. */
static uint32_t *retired[40];
static int nretired;
static bool parked;
static char stop_only[96], stop_what[24];
/* Bit d of peers[o]: device d may access device o's memory, because the
 * application enabled peer access from d's context to o's (cuMemAlloc
 * memory follows peer access; our objects need cuMemSetAccess for it). */
#define MAX_DEVICES 16
static uint64_t peers[MAX_DEVICES];
/* The devices objects were ever made on (bit per ordinal; written under
 * lock, read without): one bit means no copy can go between devices. */
static atomic_uint_fast64_t obj_devices;
/* Per block size (256 B << class) and device: a slab that last had room. */
#define SLAB_CLASSES 14
static uint32_t slab_hint[MAX_DEVICES][SLAB_CLASSES];

static buffer *buf(uint32_t id)
{
	return &blocks[id / BLOCK_BUFS][id % BLOCK_BUFS];
}

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static CUmemAllocationProp prop_for(CUdevice dev)
{
	CUmemAllocationProp p = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev },
	};
	return p;
}

static uint64_t granularity(CUdevice dev)
{
	REAL(CUresult, cuMemGetAllocationGranularity,
	     (size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags));
	static uint64_t cache[64];
	if (dev >= 0 && dev < 64 && cache[dev])
		return cache[dev];
	CUmemAllocationProp p = prop_for(dev);
	size_t g = 0;
	if (real_cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || !g)
		g = 2u << 20;
	if (dev >= 0 && dev < 64)
		cache[dev] = g;
	return g;
}

/* Maps handle h at va for size bytes, readable and writable by dev and by
 * the devices that enabled peer access to it; lock held. */
static CUresult map_at(uint64_t va, uint64_t size, CUmemGenericAllocationHandle h, CUdevice dev)
{
	REAL(CUresult, cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long));
	REAL(CUresult, cuMemSetAccess, (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t));
	REAL(CUresult, cuMemUnmap, (CUdeviceptr, size_t));
	CUresult r = real_cuMemMap(va, size, 0, h, 0);
	if (r)
		return r;
	CUmemAccessDesc acc[1 + MAX_DEVICES];
	size_t n = 0;
	acc[n++] = (CUmemAccessDesc){ .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev },
				      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	uint64_t mask = dev >= 0 && dev < MAX_DEVICES ? peers[dev] : 0;
	for (int d = 0; d < MAX_DEVICES; d++)
		if (d != dev && (mask & (1ull << d)))
			acc[n++] = (CUmemAccessDesc){ .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d },
						      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	r = real_cuMemSetAccess(va, size, acc, n);
	if (r)
		real_cuMemUnmap(va, size);
	return r;
}

CUresult alloc_peer_access(CUdevice from, CUdevice owner, bool on)
{
	REAL(CUresult, cuMemSetAccess, (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t));
	if (from < 0 || from >= MAX_DEVICES || owner < 0 || owner >= MAX_DEVICES || from == owner)
		return CUDA_ERROR_INVALID_DEVICE;
	CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = from },
				.flags = on ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE };
	CUresult res = CUDA_SUCCESS;
	pthread_rwlock_wrlock(&lock);
	if (on)
		peers[owner] |= 1ull << from;
	else
		peers[owner] &= ~(1ull << from);
	/* Parked objects get it when they are mapped again. */
	for (uint32_t i = 0; i < nobjs; i++) {
		const object *o = &objs[i];
		if (!o->live || !o->h || o->dev != owner)
			continue;
		CUresult r = real_cuMemSetAccess(o->va, o->size, &acc, 1);
		if (r && !res)
			res = r;
	}
	pthread_rwlock_unlock(&lock);
	return res;
}

/* Makes a new object of size bytes; lock held for writing. */
static CUresult object_new(CUdevice dev, uint64_t size, uint32_t block, uint32_t *out)
{
	REAL(CUresult, cuMemCreate, (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
				     unsigned long long));
	REAL(CUresult, cuMemRelease, (CUmemGenericAllocationHandle));
	REAL(CUresult, cuMemAddressReserve, (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long));
	REAL(CUresult, cuMemAddressFree, (CUdeviceptr, size_t));
	if (nobjs == objs_cap) {
		uint32_t cap = objs_cap ? objs_cap * 2 : 256;
		object *v = realloc(objs, cap * sizeof(*v));
		if (!v)
			return CUDA_ERROR_OUT_OF_MEMORY;
		objs = v;
		objs_cap = cap;
	}
	CUmemAllocationProp p = prop_for(dev);
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	CUresult r = real_cuMemCreate(&h, size, &p, 0);
	if (r)
		return r;
	r = real_cuMemAddressReserve(&va, size, granularity(dev), 0, 0);
	if (r) {
		real_cuMemRelease(h);
		return r;
	}
	r = map_at(va, size, h, dev);
	if (r) {
		real_cuMemAddressFree(va, size);
		real_cuMemRelease(h);
		return r;
	}
	object *o = &objs[nobjs];
	*o = (object){ .va = va, .size = size, .dev = dev, .h = h, .block = block, .live = true };
	if (dev >= 0 && dev < 64)
		atomic_fetch_or(&obj_devices, (uint_fast64_t)1 << dev);
	if (block) {
		o->bitmap = calloc((size / block + 63) / 64, sizeof(uint64_t));
		if (!o->bitmap) {
			REAL(CUresult, cuMemUnmap, (CUdeviceptr, size_t));
			real_cuMemUnmap(va, size);
			real_cuMemAddressFree(va, size);
			real_cuMemRelease(h);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	*out = nobjs++;
	return CUDA_SUCCESS;
}

/* Whether every live object is mapped. Once they all are, a parked
 * process is parked no more: its buffers are present. Lock held for
 * writing. */
static bool settle(void)
{
	bool all = true;
	for (uint32_t i = 0; i < nobjs; i++)
		all &= !objs[i].live || objs[i].h != 0;
	if (all && parked) {
		parked = false;
		uint32_t nb = atomic_load(&nby_va);
		const uint32_t *ids = atomic_load(&by_va);
		for (uint32_t i = 0; i < nb; i++)
			state_set(buf(ids[i])->slot, WIRE_PRESENT);
	}
	return all;
}

static void object_drop(uint32_t id)
{
	REAL(CUresult, cuMemUnmap, (CUdeviceptr, size_t));
	REAL(CUresult, cuMemRelease, (CUmemGenericAllocationHandle));
	REAL(CUresult, cuMemAddressFree, (CUdeviceptr, size_t));
	object *o = &objs[id];
	cow_freed(o->va, o->size);
	lazy_freed(o->va, o->size);
	if (o->h) {
		real_cuMemUnmap(o->va, o->size);
		real_cuMemRelease(o->h);
	}
	real_cuMemAddressFree(o->va, o->size);
	if (o->kept)
		close(o->kept - 1);
	o->kept = 0;
	free(o->bitmap);
	o->bitmap = NULL;
	o->live = false;
	/* Freed before a lazy restore brought it back: the fill never will,
	 * and it may have been the last one missing. */
	if (parked)
		settle();
}

/* Position of the first entry above va in v[0..n). */
static size_t index_in(const uint32_t *v, size_t n, uint64_t va)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (buf(v[mid])->va <= va)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static size_t by_va_index(uint64_t va)
{
	return index_in(atomic_load(&by_va), atomic_load(&nby_va), va);
}

/* Writers bracket changes of the index: the count is odd meanwhile. */
static void index_begin(void)
{
	atomic_fetch_add(&seq, 1);
}

static void index_end(void)
{
	atomic_fetch_add(&seq, 1);
}

static CUresult buffer_add(uint64_t va, uint64_t size, uint32_t obj, uint32_t device)
{
	uint32_t id = atomic_load(&nbufs);
	if (id % BLOCK_BUFS == 0) {
		if (id / BLOCK_BUFS == MAX_BLOCKS)
			return CUDA_ERROR_OUT_OF_MEMORY;
		buffer *b = calloc(BLOCK_BUFS, sizeof(*b));
		if (!b)
			return CUDA_ERROR_OUT_OF_MEMORY;
		blocks[id / BLOCK_BUFS] = b;
	}
	uint32_t n = atomic_load(&nby_va), *v = atomic_load(&by_va);
	if (n == by_va_cap) {
		/* The old array is retired, not freed: a reader may be in it. */
		uint32_t cap = by_va_cap ? by_va_cap * 2 : 1024;
		uint32_t *nv = malloc(cap * sizeof(*nv));
		if (!nv)
			return CUDA_ERROR_OUT_OF_MEMORY;
		if (n)
			memcpy(nv, v, n * sizeof(*nv));
		atomic_store(&by_va, nv);
		if (v)
			retired[nretired++] = v;
		by_va_cap = cap;
		v = nv;
	}
	/* Buffer ids are never reused, so counters stay with their buffer. */
	buffer *b = buf(id);
	b->va = va;
	b->size = size;
	b->obj = obj;
	b->device = device;
	b->live = true;
	b->slot = state_add(va, size, device, WIRE_PRESENT);
	atomic_init(&b->reads, 0);
	atomic_init(&b->writes, 0);
	size_t i = index_in(v, n, va);
	index_begin();
	memmove(&v[i + 1], &v[i], (n - i) * sizeof(*v));
	v[i] = id;
	atomic_store(&nbufs, id + 1);
	atomic_store(&nby_va, n + 1);
	index_end();
	return CUDA_SUCCESS;
}

/* Removes buffer at position i of the index; lock held for writing. */
static void index_remove(size_t i)
{
	uint32_t *v = atomic_load(&by_va), n = atomic_load(&nby_va);
	buffer *b = buf(v[i]);
	b->live = false;
	state_remove(b->slot);
	index_begin();
	memmove(&v[i], &v[i + 1], (n - i - 1) * sizeof(*v));
	atomic_store(&nby_va, n - 1);
	index_end();
}

static CUresult current_device(CUdevice *dev)
{
	REAL(CUresult, cuCtxGetDevice, (CUdevice *));
	return real_cuCtxGetDevice(dev);
}

CUresult alloc_device(CUdeviceptr *dptr, size_t bytes)
{
	if (!dptr || bytes == 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUdevice dev;
	CUresult r = current_device(&dev);
	if (r)
		return r;
	uint64_t gran = granularity(dev);
	pthread_rwlock_wrlock(&lock);
	uint32_t id = 0;
	uint64_t va = 0;
	if (bytes > gran / 2) {
		r = object_new(dev, round_up(bytes, gran), 0, &id);
		va = r ? 0 : objs[id].va;
	} else {
		uint32_t block = SLAB_MIN, cls = 0;
		while (block < bytes) {
			block *= 2;
			cls++;
		}
		/* The hinted slab of that block size if it has room, else any,
		 * else a new one. */
		uint32_t *hint = dev < MAX_DEVICES && cls < SLAB_CLASSES ? &slab_hint[dev][cls] : NULL;
		id = hint ? *hint : 0;
		bool room = id < nobjs && objs[id].live && objs[id].block == block && objs[id].dev == dev &&
			    objs[id].used < objs[id].size / block;
		for (uint32_t k = 0; !room && k < nobjs; k++) {
			id = k;
			room = objs[k].live && objs[k].block == block && objs[k].dev == dev &&
			       objs[k].used < objs[k].size / block;
		}
		if (!room)
			r = object_new(dev, gran, block, &id);
		if (!r) {
			object *o = &objs[id];
			uint64_t n = o->size / block, w = 0;
			while (w < (n + 63) / 64 && o->bitmap[w] == ~0ull)
				w++;
			uint64_t k = w * 64 + (uint64_t)__builtin_ctzll(~o->bitmap[w]);
			o->bitmap[k / 64] |= 1ull << (k % 64);
			o->used++;
			va = o->va + k * block;
			if (hint)
				*hint = id;
		}
	}
	if (!r)
		r = buffer_add(va, bytes, id, (uint32_t)dev);
	pthread_rwlock_unlock(&lock);
	if (!r)
		*dptr = va;
	return r;
}

CUresult alloc_free(CUdeviceptr dptr)
{
	REAL(CUresult, cuCtxSynchronize, (void));
	pthread_rwlock_wrlock(&lock);
	size_t i = by_va_index(dptr);
	if (i == 0 || buf(atomic_load(&by_va)[i - 1])->va != dptr) {
		pthread_rwlock_unlock(&lock);
		return CUDA_ERROR_NOT_FOUND; /* not the tracer's: the driver's to free */
	}
	/* cuMemFree waits for the device; work in flight may use the memory. */
	real_cuCtxSynchronize();
	buffer *b = buf(atomic_load(&by_va)[i - 1]);
	if (b->obj == NO_OBJECT) { /* not cuMemAlloc's: cuMemFree refuses it */
		pthread_rwlock_unlock(&lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	object *o = &objs[b->obj];
	uint32_t id = b->obj;
	index_remove(i - 1);
	if (o->block) {
		uint64_t k = (dptr - o->va) / o->block;
		o->bitmap[k / 64] &= ~(1ull << (k % 64));
		if (--o->used == 0)
			object_drop(id);
	} else {
		object_drop(id);
	}
	pthread_rwlock_unlock(&lock);
	return CUDA_SUCCESS;
}

bool alloc_cross(uint64_t dst, uint64_t src, size_t n, CUdevice *dst_dev, CUdevice *src_dev)
{
	CUdevice cur;
	buffer_ref d, s;
	uint_fast64_t devs = atomic_load_explicit(&obj_devices, memory_order_relaxed);
	if (!(devs & (devs - 1))) /* objects on one device at most */
		return false;
	if (!n || current_device(&cur) || !alloc_find(dst, &d) || !alloc_find(src, &s))
		return false;
	pthread_rwlock_rdlock(&lock);
	const buffer *bd = buf(d.id), *bs = buf(s.id);
	bool ours = bd->obj != NO_OBJECT && bs->obj != NO_OBJECT;
	CUdevice dd = (CUdevice)bd->device, sd = (CUdevice)bs->device;
	/* Whether cur may access device x's objects. */
#define REACHES(x) ((x) == cur || ((x) < MAX_DEVICES && cur >= 0 && cur < MAX_DEVICES && (peers[x] >> cur & 1)))
	bool cross = ours && dd != sd && !(REACHES(dd) && REACHES(sd));
#undef REACHES
	pthread_rwlock_unlock(&lock);
	*dst_dev = dd;
	*src_dev = sd;
	return cross;
}

bool alloc_find(uint64_t addr, buffer_ref *out)
{
	for (;;) {
		unsigned s0 = atomic_load(&seq);
		if (s0 & 1)
			continue; /* a writer is changing the index */
		const uint32_t *v = atomic_load(&by_va);
		size_t n = atomic_load(&nby_va), i = v ? index_in(v, n, addr) : 0;
		bool found = false;
		if (i > 0) {
			uint32_t id = v[i - 1];
			const buffer *b = buf(id);
			if (addr < b->va + b->size) {
				*out = (buffer_ref){ id, b->va, b->size };
				found = true;
			}
		}
		if (atomic_load(&seq) == s0)
			return found;
	}
}

int alloc_ipc_of(uint64_t addr, uint64_t *key, uint64_t *size, uint64_t *offset, CUdevice *dev)
{
	buffer_ref b;
	if (!alloc_find(addr, &b) || !alloc_owned(b.id))
		return -ENOENT;
	pthread_rwlock_rdlock(&lock);
	const buffer *bf = buf(b.id);
	int e = -ENOENT;
	if (bf->live && bf->obj < nobjs && objs[bf->obj].live) {
		const object *o = &objs[bf->obj];
		*key = o->va;
		*size = o->size;
		*offset = bf->va - o->va;
		*dev = o->dev;
		e = 0;
	}
	pthread_rwlock_unlock(&lock);
	return e;
}

/* The live object at key (its VA) of size bytes, or NULL; lock held. */
static object *object_at(uint64_t key, uint64_t size)
{
	for (uint32_t i = 0; i < nobjs; i++)
		if (objs[i].live && objs[i].va == key && objs[i].size == size)
			return &objs[i];
	return NULL;
}

int alloc_share(uint64_t key, uint64_t size, int *fd)
{
	REAL(CUresult, cuMemExportToShareableHandle,
	     (void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long));
	pthread_rwlock_wrlock(&lock);
	object *o = object_at(key, size);
	int e = !o ? -ENOENT : !o->h ? -EAGAIN : 0;
	if (!e && !o->kept) {
		int x = -1;
		if (real_cuMemExportToShareableHandle(&x, o->h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ||
		    x < 0)
			e = -EIO;
		else
			o->kept = x + 1;
	}
	if (!e) {
		*fd = fcntl(o->kept - 1, F_DUPFD_CLOEXEC, 3);
		e = *fd < 0 ? -errno : 0;
		o->shared = true;
	}
	pthread_rwlock_unlock(&lock);
	return e;
}

bool alloc_owned(uint32_t id)
{
	return id < atomic_load_explicit(&nbufs, memory_order_acquire) && buf(id)->obj != NO_OBJECT;
}

void alloc_count(uint32_t id, bool read, bool write)
{
	if (id >= atomic_load_explicit(&nbufs, memory_order_acquire))
		return;
	buffer *b = buf(id);
	atomic_store_explicit(&b->last, atomic_fetch_add_explicit(&uses, 1, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	if (read)
		atomic_fetch_add_explicit(&b->reads, 1, memory_order_relaxed);
	if (write)
		atomic_fetch_add_explicit(&b->writes, 1, memory_order_relaxed);
}

int alloc_list(wire_buffer **out, size_t *n)
{
	pthread_rwlock_rdlock(&lock);
	uint32_t count = atomic_load(&nby_va);
	const uint32_t *ids = atomic_load(&by_va);
	wire_buffer *v = malloc((count ? count : 1) * sizeof(*v));
	if (v) {
		for (uint32_t i = 0; i < count; i++) {
			buffer *b = buf(ids[i]);
			v[i] = (wire_buffer){ .va = b->va, .size = b->size, .device = b->device,
					      .state = parked ? WIRE_PARKED_STATE : WIRE_PRESENT,
					      .reads = atomic_load(&b->reads), .writes = atomic_load(&b->writes) };
		}
		*n = count;
	}
	pthread_rwlock_unlock(&lock);
	*out = v;
	return v ? 0 : -ENOMEM;
}

int alloc_add_mapping(uint64_t va, uint64_t size, uint32_t device)
{
	pthread_rwlock_wrlock(&lock);
	CUresult r = buffer_add(va, size, NO_OBJECT, device);
	pthread_rwlock_unlock(&lock);
	return r ? -ENOMEM : 0;
}

void alloc_remove_mappings(uint64_t va, uint64_t size)
{
	pthread_rwlock_wrlock(&lock);
	for (size_t i = by_va_index(va); i > 0;) {
		buffer *b = buf(atomic_load(&by_va)[i - 1]);
		if (b->obj != NO_OBJECT || b->va < va || b->va + b->size > va + size)
			break;
		index_remove(--i);
	}
	/* Mappings that start above va too. */
	size_t i = by_va_index(va);
	while (i < atomic_load(&nby_va)) {
		buffer *b = buf(atomic_load(&by_va)[i]);
		if (b->va >= va + size)
			break;
		if (b->obj == NO_OBJECT && b->va + b->size <= va + size)
			index_remove(i);
		else
			i++;
	}
	pthread_rwlock_unlock(&lock);
}

void alloc_mark_stop_only(const char *what, const char *reason)
{
	pthread_rwlock_wrlock(&lock);
	if (!stop_only[0]) {
		snprintf(stop_only, sizeof(stop_only), "%s", reason);
		snprintf(stop_what, sizeof(stop_what), "%s", what);
		state_stop_only(stop_what);
		tr_log("this process is stop-only: %s", reason);
	}
	pthread_rwlock_unlock(&lock);
}

bool alloc_stop_only(char *why, size_t n)
{
	pthread_rwlock_rdlock(&lock);
	bool stop = stop_only[0] != 0;
	if (stop)
		snprintf(why, n, "%s", stop_only);
	pthread_rwlock_unlock(&lock);
	return stop;
}

void alloc_stats(uint64_t *buffers, uint64_t *objects, uint64_t *bytes)
{
	pthread_rwlock_rdlock(&lock);
	*buffers = atomic_load(&nby_va);
	*objects = 0;
	*bytes = 0;
	for (uint32_t i = 0; i < nobjs; i++) {
		if (objs[i].live) {
			(*objects)++;
			*bytes += objs[i].size;
		}
	}
	pthread_rwlock_unlock(&lock);
}

void alloc_state_fill(struct state_header *t, int fd)
{
	pthread_rwlock_wrlock(&lock);
	state_publish(t, fd);
	if (stop_only[0])
		state_stop_only(stop_what);
	uint32_t n = atomic_load(&nby_va);
	const uint32_t *ids = atomic_load(&by_va);
	for (uint32_t i = 0; i < n; i++) {
		buffer *b = buf(ids[i]);
		b->slot = state_add(b->va, b->size, b->device, parked ? WIRE_PARKED_STATE : WIRE_PRESENT);
	}
	pthread_rwlock_unlock(&lock);
}

bool alloc_parked(void)
{
	/* An application thread's free may settle it (object_drop). */
	pthread_rwlock_rdlock(&lock);
	bool p = parked;
	pthread_rwlock_unlock(&lock);
	return p;
}

void alloc_missing(char *what, size_t n)
{
	pthread_rwlock_rdlock(&lock);
	uint32_t i = 0;
	while (i < nobjs && !(objs[i].live && !objs[i].h))
		i++;
	if (i < nobjs)
		snprintf(what, n, "its object of %llu bytes at 0x%llx", (unsigned long long)objs[i].size,
			 (unsigned long long)objs[i].va);
	else
		snprintf(what, n, "its objects");
	pthread_rwlock_unlock(&lock);
}

/* Per object, its last use, while hand_over sorts; guarded by lock. */
static uint64_t *last_use;

/* Objects by their last use, least recent first, and those never used
 * after all: the order in which a restored process is likely to need them
 * (what it used last before the checkpoint it will use again last in its
 * next round), which a lazy restore prefetches in. */
static int by_last_use(const void *a, const void *b)
{
	uint64_t x = last_use[*(const uint32_t *)a] - 1, y = last_use[*(const uint32_t *)b] - 1;
	return x < y ? -1 : x > y ? 1 : (*(const uint32_t *)a > *(const uint32_t *)b) - (*(const uint32_t *)a < *(const uint32_t *)b);
}

int alloc_export(alloc_emit_fn emit, void *arg)
{
	REAL(CUresult, cuMemExportToShareableHandle,
	     (void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long));
	pthread_rwlock_wrlock(&lock);
	int e = parked ? -EALREADY : 0;
	obj_batch batch;
	batch_init(&batch, emit, arg);
	/* Each object's write history (the writes of its buffers), and its
	 * last use (the latest of its buffers'). */
	uint64_t *writes = calloc(nobjs ? nobjs : 1, sizeof(*writes));
	uint32_t *order = calloc(nobjs ? nobjs : 1, sizeof(*order));
	last_use = calloc(nobjs ? nobjs : 1, sizeof(*last_use));
	if (!last_use) {
		free(order);
		order = NULL;
	}
	uint32_t nb = atomic_load(&nby_va);
	const uint32_t *ids = atomic_load(&by_va);
	for (uint32_t i = 0; writes && last_use && i < nb; i++) {
		const buffer *b = buf(ids[i]);
		if (b->obj != NO_OBJECT && b->obj < nobjs) {
			writes[b->obj] += atomic_load(&b->writes);
			uint64_t l = atomic_load(&b->last);
			last_use[b->obj] = l > last_use[b->obj] ? l : last_use[b->obj];
		}
	}
	for (uint32_t i = 0; order && i < nobjs; i++)
		order[i] = i;
	if (order)
		qsort(order, nobjs, sizeof(*order), by_last_use);
	free(last_use);
	last_use = NULL;
	/* Hand over every object first: nothing is released until phosfs
	 * holds all of them. */
	for (uint32_t k = 0; k < nobjs && !e && !batch.err; k++) {
		uint32_t i = order ? order[k] : k;
		object *o = &objs[i];
		if (!o->live)
			continue;
		int fd = -1;
		if (o->kept) {
			fd = fcntl(o->kept - 1, F_DUPFD_CLOEXEC, 3);
			if (fd < 0) {
				e = -errno;
				break;
			}
		} else if (real_cuMemExportToShareableHandle(&fd, o->h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)) {
			e = -EIO;
			break;
		}
		wire_object rec = { .key = o->va, .va = o->va, .size = o->size, .device = (uint32_t)o->dev,
				    .flags = o->shared ? WIRE_OBJ_EXPORTED : 0, .writes = writes ? writes[i] : 0 };
		batch_add(&batch, &rec, fd);
	}
	free(writes);
	free(order);
	int be = batch_finish(&batch);
	e = e ? e : be;
	pthread_rwlock_unlock(&lock);
	return e;
}

void alloc_release(void)
{
	REAL(CUresult, cuMemUnmap, (CUdeviceptr, size_t));
	REAL(CUresult, cuMemRelease, (CUmemGenericAllocationHandle));
	pthread_rwlock_wrlock(&lock);
	for (uint32_t i = 0; i < nobjs; i++) {
		object *o = &objs[i];
		if (!o->live)
			continue;
		real_cuMemUnmap(o->va, o->size);
		real_cuMemRelease(o->h);
		o->h = 0;
		if (o->kept)
			close(o->kept - 1); /* phosfs holds the memory now */
		o->kept = 0;
	}
	parked = true;
	pthread_rwlock_unlock(&lock);
}

/* Maps the objects of recs again from their fds; lock held for writing.
 * Strict (an unpark): every record must name a parked object. Lenient (a
 * lazy restore's arrivals): one that names no parked object was freed
 * meanwhile, and is skipped. */
static int map_objects(const wire_object *recs, const int *fds, int n, bool lenient)
{
	REAL(CUresult, cuMemImportFromShareableHandle,
	     (CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType));
	REAL(CUresult, cuMemRelease, (CUmemGenericAllocationHandle));
	int e = 0;
	for (int k = 0; k < n && (!e || lenient); k++) {
		if (recs[k].flags & WIRE_OBJ_APP)
			continue; /* vmm.c's */
		object *o = object_at(recs[k].key, recs[k].size);
		if (!o || o->h) {
			if (!lenient)
				e = -ENOENT;
			continue;
		}
		CUmemGenericAllocationHandle h;
		if (real_cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fds[k],
							CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
			e = -EIO;
			continue;
		}
		if (map_at(o->va, o->size, h, o->dev)) {
			real_cuMemRelease(h);
			e = -EIO;
			continue;
		}
		o->h = h;
		int kept = fcntl(fds[k], F_DUPFD_CLOEXEC, 3);
		o->kept = kept >= 0 ? kept + 1 : 0;
	}
	bool all = settle();
	return e ? e : all ? 0 : -EAGAIN;
}

int alloc_unpark(const wire_object *recs, const int *fds, int n)
{
	pthread_rwlock_wrlock(&lock);
	int e = map_objects(recs, fds, n, false);
	pthread_rwlock_unlock(&lock);
	return e;
}

int alloc_arrive(const wire_object *recs, const int *fds, int n)
{
	pthread_rwlock_wrlock(&lock);
	int e = map_objects(recs, fds, n, true);
	pthread_rwlock_unlock(&lock);
	return e == -EAGAIN ? 0 : e;
}

void alloc_forget_fds(void)
{
	/* A forked child: one thread, and the lock may be held by a thread of
	 * the parent that the child does not have, so none is taken. */
	for (uint32_t i = 0; i < nobjs; i++) {
		if (objs[i].kept)
			close(objs[i].kept - 1);
		objs[i].kept = 0;
	}
}
