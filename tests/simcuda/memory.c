/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Device memory. Device addresses are host addresses:
 *  - a VA reservation is a PROT_NONE mapping;
 *  - a physical allocation (cuMemCreate) is a memfd, so its exported fd maps
 *    the same bytes in any process;
 *  - cuMemMap maps the memfd over the reservation, inaccessible until
 *    cuMemSetAccess, as on a GPU;
 *  - cuMemAlloc memory is anonymous shared memory with no fd to export,
 *    until a legacy IPC handle is asked for it (ipc.c): then its bytes move
 *    into a memfd mapped where they were, which the handle names.
 *
 * As on a GPU, a copy or set that is not a peer copy reaches only memory
 * that the current context's device may access: a mapping that
 * cuMemSetAccess opened to that device, or cuMemAlloc memory of that
 * device or of one it enabled peer access to.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define PAGE 4096ull
#define MEMFD_NAME "simcuda-phys"

/* A physical allocation. Alive while it has a handle reference or maps. */
typedef struct phys {
	int fd;
	size_t size;
	int handle_refs; /* cuMemCreate/Import/Retain minus cuMemRelease */
	int maps;
	CUmemAllocationProp prop;
	ino_t ino;         /* its memfd's */
	bool counted;      /* in used_bytes: the first live phys of its memfd */
	struct phys *next; /* live physs, from physs */
} phys;

typedef enum { RANGE_RESERVED, RANGE_MAPPED, RANGE_ALLOC } range_kind;

/* A range of device VA: a reservation, a mapping inside one, or a whole
 * cuMemAlloc allocation. */
typedef struct range {
	uintptr_t va;
	size_t size;
	range_kind kind;
	phys *ph;         /* RANGE_MAPPED */
	unsigned readers; /* RANGE_MAPPED: devices cuMemSetAccess let read it (bit per ordinal) */
	unsigned writers; /* ... and write it */
	CUdevice dev;     /* RANGE_ALLOC: the device it was allocated on */
	int ipc_fd;       /* RANGE_ALLOC: its memfd once it has an IPC handle, plus 1 (0: none) */
	int opens;        /* RANGE_ALLOC: another process's memory (IPC), opened this many times */
	bool managed;     /* RANGE_ALLOC: cuMemAllocManaged's */
	uint64_t ipc_ino; /* ... whose memfd is this inode */
} range;

/* Guarded by mem_lock: the three range tables and used_bytes. Each table is
 * sorted by va and has no overlaps. */
static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
typedef struct table {
	range *v;
	size_t n, cap;
} table;
static table reserved, mapped, allocs;
static uint64_t used_bytes;
static uint64_t anon_bytes; /* of used_bytes, cuMemAlloc's (no memfd) */

/* Pinned host allocations (cuMemAllocHost), for cuMemFreeHost. */
typedef struct host_block {
	void *p;
	size_t size;
	struct host_block *next;
} host_block;
static host_block *host_blocks; /* guarded by mem_lock */

static size_t find_index(const table *t, uintptr_t va)
{
	/* first entry whose va is > va, minus one: the candidate container */
	size_t lo = 0, hi = t->n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (t->v[mid].va <= va)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo; /* insertion point */
}

/* Replaces [va, va+size) with inaccessible anonymous memory. */
static void disable(uintptr_t va, size_t size)
{
	mmap((void *)va, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

void sc_mem_fork_prepare(void)
{
	pthread_mutex_lock(&mem_lock);
}

void sc_mem_fork_parent(void)
{
	pthread_mutex_unlock(&mem_lock);
}

void sc_mem_fork_child(void)
{
	for (size_t i = 0; i < mapped.n; i++) {
		disable(mapped.v[i].va, mapped.v[i].size);
		if (mapped.v[i].ph && mapped.v[i].ph->fd >= 0) {
			close(mapped.v[i].ph->fd);
			mapped.v[i].ph->fd = -1;
		}
	}
	for (size_t i = 0; i < allocs.n; i++)
		disable(allocs.v[i].va, allocs.v[i].size);
	pthread_mutex_unlock(&mem_lock);
}

static range *containing(const table *t, uintptr_t va)
{
	size_t i = find_index(t, va);
	if (i == 0)
		return NULL;
	range *r = &t->v[i - 1];
	return va < r->va + r->size ? r : NULL;
}

static bool overlaps(const table *t, uintptr_t va, size_t size)
{
	size_t i = find_index(t, va);
	if (i > 0 && t->v[i - 1].va + t->v[i - 1].size > va)
		return true;
	return i < t->n && t->v[i].va < va + size;
}

static int insert(table *t, range r)
{
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		range *v = realloc(t->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		t->v = v;
		t->cap = cap;
	}
	size_t i = find_index(t, r.va);
	memmove(&t->v[i + 1], &t->v[i], (t->n - i) * sizeof(*t->v));
	t->v[i] = r;
	t->n++;
	return 0;
}

static void remove_at(table *t, range *r)
{
	size_t i = (size_t)(r - t->v);
	memmove(&t->v[i], &t->v[i + 1], (t->n - i - 1) * sizeof(*t->v));
	t->n--;
}

uint64_t sc_mem_physical_bytes(void)
{
	pthread_mutex_lock(&mem_lock);
	uint64_t b = used_bytes;
	pthread_mutex_unlock(&mem_lock);
	return b;
}

/* Whether [p, p+n) is device memory that device `from` may access, or with
 * from < 0, that some device may. A copy (any_alloc) reaches cuMemAlloc
 * memory of any device, as the driver copies between devices without peer
 * access; a kernel or a set reaches it from its own device or one that
 * enabled peer access to it. mem_lock held. */
static bool is_device_locked(uintptr_t p, size_t n, CUdevice from, bool any_alloc)
{
	if (n == 0)
		n = 1;
	if (p + n < p)
		return false;
	range *a = containing(&allocs, p);
	if (a)
		return p + n <= a->va + a->size && (from < 0 || any_alloc || sc_ctx_peer_enabled(from, a->dev));
	/* May span several adjacent mappings. */
	unsigned need = from < 0 ? ~0u : 1u << from;
	while (n) {
		range *m = containing(&mapped, p);
		if (!m || !(m->readers & need))
			return false;
		size_t in = m->va + m->size - p;
		if (in >= n)
			return true;
		p += in;
		n -= in;
	}
	return true;
}

bool sc_mem_is_device(uintptr_t p, size_t n)
{
	pthread_mutex_lock(&mem_lock);
	bool ok = is_device_locked(p, n, -1, true);
	pthread_mutex_unlock(&mem_lock);
	return ok;
}

/* Whether the current context's device may reach [p, p+n) of device
 * memory, for a copy (copy) or for a set. */
static bool reachable(uintptr_t p, size_t n, bool copy)
{
	CUcontext c = sc_ctx_current();
	if (!c)
		return false;
	pthread_mutex_lock(&mem_lock);
	bool ok = is_device_locked(p, n, ((sc_ctx *)c)->dev, copy);
	pthread_mutex_unlock(&mem_lock);
	return ok;
}

static size_t round_up(size_t v, size_t to)
{
	return (v + to - 1) / to * to;
}

/* ---- VMM ---------------------------------------------------------------- */

/* A place memory may be made: a device, or host memory (as NCCL makes its
 * host buffers, CU_MEM_LOCATION_TYPE_HOST_NUMA). */
static bool location_ok(const CUmemLocation *l)
{
	return l->type == CU_MEM_LOCATION_TYPE_DEVICE || l->type == CU_MEM_LOCATION_TYPE_HOST ||
	       (l->type == CU_MEM_LOCATION_TYPE_HOST_NUMA && l->id >= 0);
}

/* The access bit of location l: a device's, or the CPU's (bit 31). */
static unsigned access_bit(const CUmemLocation *l)
{
	return l->type == CU_MEM_LOCATION_TYPE_DEVICE ? 1u << l->id : 1u << 31;
}

SC_EXPORT CUresult cuMemGetAllocationGranularity(size_t *gran, const CUmemAllocationProp *prop,
						  CUmemAllocationGranularity_flags option)
{
	(void)option;
	if (!gran || !prop)
		return CUDA_ERROR_INVALID_VALUE;
	if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || !location_ok(&prop->location))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? sc_check_device(prop->location.id) : 0;
	if (r)
		return r;
	*gran = SC_GRANULARITY;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
				       CUdeviceptr addr, unsigned long long flags)
{
	SC_API();
	(void)flags;
	if (!ptr || size == 0 || size % SC_GRANULARITY)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_check_init();
	if (r)
		return r;
	if (alignment == 0)
		alignment = SC_GRANULARITY;
	if (alignment & (alignment - 1))
		return CUDA_ERROR_INVALID_VALUE;

	void *p = MAP_FAILED;
	const int mflags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
	if (addr && addr % alignment == 0)
		p = mmap((void *)addr, size, PROT_NONE, mflags | MAP_FIXED_NOREPLACE, -1, 0);
	if (p == MAP_FAILED) {
		/* Over-reserve, then trim to the alignment asked for. */
		size_t span = size + alignment;
		void *q = mmap(NULL, span, PROT_NONE, mflags, -1, 0);
		if (q == MAP_FAILED)
			return CUDA_ERROR_OUT_OF_MEMORY;
		uintptr_t base = round_up((uintptr_t)q, alignment);
		if (base > (uintptr_t)q)
			munmap(q, base - (uintptr_t)q);
		uintptr_t end = (uintptr_t)q + span;
		if (end > base + size)
			munmap((void *)(base + size), end - (base + size));
		p = (void *)base;
	}
	pthread_mutex_lock(&mem_lock);
	int e = insert(&reserved, (range){ .va = (uintptr_t)p, .size = size, .kind = RANGE_RESERVED });
	pthread_mutex_unlock(&mem_lock);
	if (e) {
		munmap(p, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*ptr = (CUdeviceptr)p;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	SC_API();
	CUresult r = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mem_lock);
	range *res = containing(&reserved, ptr);
	if (res && res->va == ptr && res->size == size) {
		if (overlaps(&mapped, ptr, size)) {
			r = CUDA_ERROR_INVALID_VALUE; /* still mapped */
		} else {
			munmap((void *)ptr, size);
			remove_at(&reserved, res);
			r = CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&mem_lock);
	return r;
}

/* The live physs (mem_lock): memory imported again (the same memfd)
 * counts once, as on a GPU, where an import takes no memory. */
static phys *physs;

static void phys_put_locked(phys *ph)
{
	if (ph->handle_refs == 0 && ph->maps == 0) {
		phys **at = &physs;
		while (*at != ph)
			at = &(*at)->next;
		*at = ph->next;
		phys *twin = physs;
		while (twin && twin->ino != ph->ino)
			twin = twin->next;
		if (ph->counted && twin)
			twin->counted = true; /* it counts on */
		else if (ph->counted)
			used_bytes -= ph->size;
		close(ph->fd);
		free(ph);
	}
}

/* A phys of fd: made (created), or imported. Memory made past the
 * devices' total fails (the machine's, with $SIMCUDA_MEMORY_MIB, where an
 * import takes none). */
static CUresult phys_new_locked(int fd, size_t size, const CUmemAllocationProp *prop, bool created, phys **out)
{
	struct stat st;
	if (fstat(fd, &st) != 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	phys *twin = physs;
	while (twin && twin->ino != st.st_ino)
		twin = twin->next;
	if (sc_machine_memory() ? created && sc_machine_used() + anon_bytes > SC_TOTAL_MEM
				: !twin && used_bytes + size > SC_TOTAL_MEM)
		return CUDA_ERROR_OUT_OF_MEMORY;
	phys *ph = calloc(1, sizeof(*ph));
	if (!ph)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ph->fd = fd;
	ph->size = size;
	ph->handle_refs = 1;
	ph->prop = *prop;
	ph->ino = st.st_ino;
	ph->counted = !twin;
	ph->next = physs;
	physs = ph;
	if (!twin)
		used_bytes += size;
	*out = ph;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
			       const CUmemAllocationProp *prop, unsigned long long flags)
{
	SC_API();
	if (!handle || !prop || flags || size == 0 || size % SC_GRANULARITY)
		return CUDA_ERROR_INVALID_VALUE;
	if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || !location_ok(&prop->location))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? sc_check_device(prop->location.id) : 0;
	if (r)
		return r;
	if (prop->requestedHandleTypes & ~(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_NONE))
		return CUDA_ERROR_NOT_SUPPORTED;

	/* The name keeps where it is, for an importer to say (as the
	 * driver's properties of an imported handle do). */
	char name[64];
	snprintf(name, sizeof(name), MEMFD_NAME "-%c%d%s",
		 prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE      ? 'd'
		 : prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ? 'n'
									 : 'h',
		 prop->location.id, sc_machine_memory() ? sc_machine_tag() : "");
	int fd = memfd_create(name, MFD_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (ftruncate(fd, (off_t)size) != 0) {
		close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	phys *ph = NULL;
	pthread_mutex_lock(&mem_lock);
	r = phys_new_locked(fd, size, prop, true, &ph);
	pthread_mutex_unlock(&mem_lock);
	if (r) {
		close(fd);
		return r;
	}
	*handle = (CUmemGenericAllocationHandle)(uintptr_t)ph;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	SC_API();
	phys *ph = (phys *)(uintptr_t)handle;
	if (!ph)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mem_lock);
	CUresult r = CUDA_ERROR_INVALID_VALUE;
	if (ph->handle_refs > 0) {
		ph->handle_refs--;
		phys_put_locked(ph);
		r = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&mem_lock);
	return r;
}

SC_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
			    CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	SC_API();
	phys *ph = (phys *)(uintptr_t)handle;
	if (!ph || flags || size == 0 || size % SC_GRANULARITY || offset % SC_GRANULARITY ||
	    ptr % SC_GRANULARITY)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&mem_lock);
	range *res = containing(&reserved, ptr);
	if (ph->handle_refs <= 0 || offset > ph->size || size > ph->size - offset)
		r = CUDA_ERROR_INVALID_VALUE;
	else if (!res || ptr + size > res->va + res->size)
		r = CUDA_ERROR_INVALID_VALUE;
	else if (overlaps(&mapped, ptr, size))
		r = CUDA_ERROR_ALREADY_MAPPED;
	if (r == CUDA_SUCCESS) {
		void *p = mmap((void *)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, ph->fd, (off_t)offset);
		if (p == MAP_FAILED) {
			r = CUDA_ERROR_OUT_OF_MEMORY;
		} else if (insert(&mapped, (range){ .va = ptr, .size = size, .kind = RANGE_MAPPED, .ph = ph })) {
			disable(ptr, size);
			r = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			ph->maps++;
		}
	}
	pthread_mutex_unlock(&mem_lock);
	return r;
}

SC_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	SC_API();
	if (size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&mem_lock);
	/* The range must be made of whole mappings. */
	uintptr_t p = ptr, end = ptr + size;
	while (p < end) {
		range *m = containing(&mapped, p);
		if (!m || m->va != p || m->va + m->size > end) {
			r = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		p += m->size;
	}
	if (r == CUDA_SUCCESS) {
		disable(ptr, size);
		for (p = ptr; p < end;) {
			range *m = containing(&mapped, p);
			phys *ph = m->ph;
			p += m->size;
			remove_at(&mapped, m);
			ph->maps--;
			phys_put_locked(ph);
		}
	}
	pthread_mutex_unlock(&mem_lock);
	return r;
}

/* The host protection that lets simcuda's copies and kernels run on m. */
static int prot_of(const range *m)
{
	return m->writers ? PROT_READ | PROT_WRITE : m->readers ? PROT_READ : PROT_NONE;
}

/* Each descriptor sets one device's access and leaves the others' as they
 * were, as on a GPU. */
SC_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	SC_API();
	if (!desc || count == 0 || size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++) {
		const CUmemLocation *l = &desc[i].location;
		if (l->type == CU_MEM_LOCATION_TYPE_DEVICE ? sc_check_device(l->id) != CUDA_SUCCESS
							   : l->type != CU_MEM_LOCATION_TYPE_HOST &&
								     l->type != CU_MEM_LOCATION_TYPE_HOST_NUMA)
			return CUDA_ERROR_INVALID_DEVICE;
		if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
		    desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			return CUDA_ERROR_INVALID_VALUE;
	}
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&mem_lock);
	uintptr_t p = ptr, end = ptr + size;
	while (p < end) {
		range *m = containing(&mapped, p);
		if (!m) {
			r = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		p = m->va + m->size;
	}
	for (p = ptr; r == CUDA_SUCCESS && p < end;) {
		range *m = containing(&mapped, p);
		for (size_t i = 0; i < count; i++) {
			unsigned bit = access_bit(&desc[i].location);
			m->readers = desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE ? m->readers & ~bit : m->readers | bit;
			m->writers = desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? m->writers | bit
											  : m->writers & ~bit;
		}
		if (mprotect((void *)m->va, m->size, prot_of(m)) != 0)
			r = CUDA_ERROR_INVALID_VALUE;
		p = m->va + m->size;
	}
	pthread_mutex_unlock(&mem_lock);
	return r;
}

SC_EXPORT CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *loc, CUdeviceptr ptr)
{
	if (!flags || !loc || loc->type != CU_MEM_LOCATION_TYPE_DEVICE || sc_check_device(loc->id))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mem_lock);
	range *m = containing(&mapped, ptr);
	CUresult r = m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (m) {
		unsigned bit = 1u << loc->id;
		*flags = (m->writers & bit)   ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
			 : (m->readers & bit) ? CU_MEM_ACCESS_FLAGS_PROT_READ
					      : CU_MEM_ACCESS_FLAGS_PROT_NONE;
	}
	pthread_mutex_unlock(&mem_lock);
	return r;
}

SC_EXPORT CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle,
						CUmemAllocationHandleType type, unsigned long long flags)
{
	SC_API();
	phys *ph = (phys *)(uintptr_t)handle;
	if (!shareable || !ph || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&mem_lock);
	if (ph->handle_refs <= 0)
		r = CUDA_ERROR_INVALID_VALUE;
	else if (!(ph->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
		r = CUDA_ERROR_INVALID_VALUE; /* the driver refuses too */
	/* A new open file each time, as the driver gives (each of its fds
	 * is an open of /dev/nvidiactl): nothing but the file the fd names
	 * tells two exports of one allocation from those of two. */
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", ph->fd);
	int fd = r ? -1 : open(path, O_RDWR | O_CLOEXEC);
	pthread_mutex_unlock(&mem_lock);
	if (r)
		return r;
	if (fd < 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	/* The exported fd is the caller's; it is not close-on-exec. */
	fcntl(fd, F_SETFD, 0);
	*(int *)shareable = fd;
	return CUDA_SUCCESS;
}

/* Whether fd is the memfd of an allocation of simcuda's; where it was
 * made into *where (from its name). */
static bool is_simcuda_memfd(int fd, CUmemLocation *where)
{
	char link[64], target[128];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, target, sizeof(target) - 1);
	if (n < 0)
		return false;
	target[n] = 0;
	const char *pre = "/memfd:" MEMFD_NAME "-";
	if (strncmp(target, pre, strlen(pre)) != 0)
		return false;
	char kind = target[strlen(pre)];
	where->type = kind == 'd'   ? CU_MEM_LOCATION_TYPE_DEVICE
		      : kind == 'n' ? CU_MEM_LOCATION_TYPE_HOST_NUMA
				    : CU_MEM_LOCATION_TYPE_HOST;
	where->id = atoi(target + strlen(pre) + 1);
	return true;
}

SC_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os_handle,
						  CUmemAllocationHandleType type)
{
	SC_API();
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUresult r = sc_check_init();
	if (r)
		return r;
	int src = (int)(intptr_t)os_handle;
	struct stat st;
	CUmemLocation where;
	if (src < 0 || fstat(src, &st) != 0 || !is_simcuda_memfd(src, &where) || st.st_size <= 0 ||
	    (uint64_t)st.st_size % SC_GRANULARITY)
		return CUDA_ERROR_INVALID_VALUE;
	int fd = fcntl(src, F_DUPFD_CLOEXEC, 0);
	if (fd < 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
		.location = where,
	};
	phys *ph = NULL;
	pthread_mutex_lock(&mem_lock);
	r = phys_new_locked(fd, (size_t)st.st_size, &prop, false, &ph);
	pthread_mutex_unlock(&mem_lock);
	if (r) {
		close(fd);
		return r;
	}
	*handle = (CUmemGenericAllocationHandle)(uintptr_t)ph;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
							  CUmemGenericAllocationHandle handle)
{
	phys *ph = (phys *)(uintptr_t)handle;
	if (!prop || !ph)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mem_lock);
	*prop = ph->prop;
	pthread_mutex_unlock(&mem_lock);
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mem_lock);
	range *m = containing(&mapped, (uintptr_t)addr);
	if (m) {
		m->ph->handle_refs++;
		*handle = (CUmemGenericAllocationHandle)(uintptr_t)m->ph;
	}
	pthread_mutex_unlock(&mem_lock);
	return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- cuMemAlloc family -------------------------------------------------- */

static CUresult alloc_device(CUdeviceptr *dptr, size_t bytes)
{
	if (!dptr || bytes == 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_ctx_require();
	if (r)
		return r;
	CUdevice dev = ((sc_ctx *)sc_ctx_current())->dev;
	size_t size = round_up(bytes, PAGE);
	pthread_mutex_lock(&mem_lock);
	bool room = sc_machine_memory() ? sc_machine_used() + anon_bytes + size <= SC_TOTAL_MEM
					: used_bytes + size <= SC_TOTAL_MEM;
	if (room) {
		used_bytes += size;
		anon_bytes += size;
	}
	pthread_mutex_unlock(&mem_lock);
	if (!room)
		return CUDA_ERROR_OUT_OF_MEMORY;
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	pthread_mutex_lock(&mem_lock);
	int e = p == MAP_FAILED ? -ENOMEM
				: insert(&allocs, (range){ .va = (uintptr_t)p, .size = size, .kind = RANGE_ALLOC,
							   .dev = dev });
	if (e) {
		used_bytes -= size;
		anon_bytes -= size;
	}
	pthread_mutex_unlock(&mem_lock);
	if (e) {
		if (p != MAP_FAILED)
			munmap(p, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*dptr = (CUdeviceptr)p;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytes)
{
	SC_API();
	return alloc_device(dptr, bytes);
}

SC_EXPORT CUresult cuMemAllocPitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
				   unsigned int elem)
{
	SC_API();
	if (!pitch || width == 0 || height == 0 || (elem != 4 && elem != 8 && elem != 16))
		return CUDA_ERROR_INVALID_VALUE;
	size_t p = round_up(width, 512);
	CUresult r = alloc_device(dptr, p * height);
	if (r == CUDA_SUCCESS)
		*pitch = p;
	return r;
}

static CUresult free_device(CUdeviceptr dptr)
{
	pthread_mutex_lock(&mem_lock);
	range *a = containing(&allocs, dptr);
	CUresult r = CUDA_ERROR_INVALID_VALUE;
	if (a && a->va == dptr && !a->opens) {
		munmap((void *)a->va, a->size);
		used_bytes -= a->size;
		anon_bytes -= a->size;
		if (a->ipc_fd)
			close(a->ipc_fd - 1);
		remove_at(&allocs, a);
		r = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&mem_lock);
	return r;
}

SC_EXPORT CUresult cuMemFree(CUdeviceptr dptr)
{
	SC_API();
	if (dptr == 0)
		return CUDA_SUCCESS;
	/* cuMemFree synchronises: work in flight may still use the memory. */
	sc_streams_drain();
	return free_device(dptr);
}

SC_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream stream)
{
	SC_API();
	(void)stream; /* available at once, which is within stream order */
	return alloc_device(dptr, bytes);
}

static void free_task(void *arg)
{
	free_device(*(CUdeviceptr *)arg);
}

SC_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
	SC_API();
	if (!sc_mem_is_device(dptr, 1))
		return CUDA_ERROR_INVALID_VALUE;
	return sc_stream_submit(stream, free_task, &dptr, sizeof(dptr));
}

SC_EXPORT CUresult cuMemGetInfo(size_t *free_bytes, size_t *total)
{
	if (!free_bytes || !total)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_ctx_require();
	if (r)
		return r;
	uint64_t used = sc_mem_physical_bytes();
	if (sc_machine_memory()) {
		pthread_mutex_lock(&mem_lock);
		used = sc_machine_used() + anon_bytes;
		pthread_mutex_unlock(&mem_lock);
	}
	*total = SC_TOTAL_MEM;
	*free_bytes = used < SC_TOTAL_MEM ? SC_TOTAL_MEM - used : 0;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr dptr)
{
	pthread_mutex_lock(&mem_lock);
	range *a = containing(&allocs, dptr);
	if (!a)
		a = containing(&mapped, dptr);
	if (a) {
		if (base)
			*base = a->va;
		if (size)
			*size = a->size;
	}
	pthread_mutex_unlock(&mem_lock);
	return a ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

/* Managed memory: cuMemAlloc memory the host may touch as well (here all
 * device memory is host memory). */
SC_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags)
{
	SC_API();
	if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = alloc_device(dptr, bytes);
	if (!r) {
		pthread_mutex_lock(&mem_lock);
		containing(&allocs, *dptr)->managed = true;
		pthread_mutex_unlock(&mem_lock);
	}
	return r;
}

int sc_mem_managed(void)
{
	pthread_mutex_lock(&mem_lock);
	int n = 0;
	for (size_t i = 0; i < allocs.n; i++)
		n += allocs.v[i].managed;
	pthread_mutex_unlock(&mem_lock);
	return n;
}

/* ---- what lies at an address ---------------------------------------------- */

/* The answer to attribute a of p, in range m (an allocation of cuMemAlloc,
 * or a mapping of cuMemCreate memory). */
static CUresult attribute(const range *m, CUpointer_attribute a, CUdeviceptr p, void *data)
{
	switch (a) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		*(CUcontext *)data = sc_ctx_current();
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned *)data = CU_MEMORYTYPE_DEVICE;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		*(CUdeviceptr *)data = p;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		*(int *)data = m->kind == RANGE_ALLOC ? m->dev : m->ph->prop.location.id;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		*(CUdeviceptr *)data = m->va;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		*(size_t *)data = m->size;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MAPPED:
		*(int *)data = 1;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
		*(int *)data = m->kind == RANGE_ALLOC && !m->opens;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_BUFFER_ID:
		*(unsigned long long *)data = (unsigned long long)m->va;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* As the driver: only where memory is (allocated or mapped): a reserved
 * VA with nothing mapped is CUDA_ERROR_INVALID_VALUE (measured on an
 * H200). */
static CUresult pointer_attributes(unsigned n, const CUpointer_attribute *attrs, void **data, CUdeviceptr p)
{
	if (!attrs || !data)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mem_lock);
	const range *m = containing(&allocs, p);
	if (!m)
		m = containing(&mapped, p);
	CUresult r = m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; !r && i < n; i++)
		r = data[i] ? attribute(m, attrs[i], p, data[i]) : CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_unlock(&mem_lock);
	return r;
}

SC_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr p)
{
	SC_API();
	return pointer_attributes(1, &attr, &data, p);
}

SC_EXPORT CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data, CUdeviceptr p)
{
	SC_API();
	return pointer_attributes(n, attrs, data, p);
}

/* ---- legacy IPC (ipc.c) --------------------------------------------------- */

CUresult sc_mem_ipc_export(uintptr_t dptr, int *fd, size_t *size, CUdevice *dev)
{
	pthread_mutex_lock(&mem_lock);
	range *a = containing(&allocs, dptr);
	CUresult r = a && !a->opens ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (!r && !a->ipc_fd) {
		/* Its bytes move into a memfd, mapped where they were. */
		int m = memfd_create("simcuda-ipc", MFD_CLOEXEC);
		if (m < 0 || ftruncate(m, (off_t)a->size) ||
		    pwrite(m, (void *)a->va, a->size, 0) != (ssize_t)a->size ||
		    mmap((void *)a->va, a->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, m, 0) == MAP_FAILED) {
			if (m >= 0)
				close(m);
			r = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			a->ipc_fd = m + 1;
		}
	}
	if (!r) {
		*fd = a->ipc_fd - 1;
		*size = a->size;
		*dev = a->dev;
	}
	pthread_mutex_unlock(&mem_lock);
	return r;
}

CUresult sc_mem_ipc_import(int fd, size_t size, uintptr_t *va)
{
	struct stat st;
	if (fstat(fd, &st) || (size_t)st.st_size < size)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_ctx_require();
	if (r)
		return r;
	CUdevice dev = ((sc_ctx *)sc_ctx_current())->dev;
	pthread_mutex_lock(&mem_lock);
	for (size_t i = 0; i < allocs.n; i++) {
		if (allocs.v[i].opens && allocs.v[i].ipc_ino == (uint64_t)st.st_ino) {
			allocs.v[i].opens++; /* the same address, as the driver gives */
			*va = allocs.v[i].va;
			pthread_mutex_unlock(&mem_lock);
			return CUDA_SUCCESS;
		}
	}
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	else if (insert(&allocs, (range){ .va = (uintptr_t)p, .size = size, .kind = RANGE_ALLOC, .dev = dev,
					  .opens = 1, .ipc_ino = (uint64_t)st.st_ino })) {
		munmap(p, size);
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		*va = (uintptr_t)p;
	}
	pthread_mutex_unlock(&mem_lock);
	return r;
}

CUresult sc_mem_ipc_close(uintptr_t va)
{
	pthread_mutex_lock(&mem_lock);
	range *a = containing(&allocs, va);
	CUresult r = a && a->va == va && a->opens ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (!r && --a->opens == 0) {
		munmap((void *)a->va, a->size);
		remove_at(&allocs, a);
	}
	pthread_mutex_unlock(&mem_lock);
	return r;
}

int sc_mem_ipc_imports(void)
{
	pthread_mutex_lock(&mem_lock);
	int n = 0;
	for (size_t i = 0; i < allocs.n; i++)
		n += allocs.v[i].opens > 0;
	pthread_mutex_unlock(&mem_lock);
	return n;
}

/* ---- pinned host memory ------------------------------------------------- */

SC_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytes, unsigned int flags)
{
	(void)flags;
	if (!pp || bytes == 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_ctx_require();
	if (r)
		return r;
	host_block *b = malloc(sizeof(*b));
	if (!b)
		return CUDA_ERROR_OUT_OF_MEMORY;
	b->size = round_up(bytes, PAGE);
	b->p = mmap(NULL, b->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (b->p == MAP_FAILED) {
		free(b);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&mem_lock);
	b->next = host_blocks;
	host_blocks = b;
	pthread_mutex_unlock(&mem_lock);
	*pp = b->p;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuMemAllocHost(void **pp, size_t bytes)
{
	return cuMemHostAlloc(pp, bytes, 0);
}

SC_EXPORT CUresult cuMemFreeHost(void *p)
{
	pthread_mutex_lock(&mem_lock);
	host_block **pb = &host_blocks, *b = NULL;
	for (; *pb; pb = &(*pb)->next) {
		if ((*pb)->p == p) {
			b = *pb;
			*pb = b->next;
			break;
		}
	}
	pthread_mutex_unlock(&mem_lock);
	if (!b)
		return CUDA_ERROR_INVALID_VALUE;
	munmap(b->p, b->size);
	free(b);
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuMemHostRegister(void *p, size_t bytes, unsigned int flags)
{
	(void)flags;
	return (p && bytes) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SC_EXPORT CUresult cuMemHostUnregister(void *p)
{
	return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- copies and sets ---------------------------------------------------- */

typedef struct copy_args {
	void *dst;
	const void *src;
	size_t n;
	uint64_t ns; /* at least this long: the bus's time for it */
} copy_args;

#define COPY_HANGS UINT64_MAX /* copy_args.ns of a copy that never ends */

static void copy_task(void *arg)
{
	copy_args *c = arg;
	/* The bytes are read at the end of the bus's time: a write to the
	 * source meanwhile, which a GPU's copy might or might not see, gets
	 * into the copy, so that a test finds a write not held off. */
	while (c->ns == COPY_HANGS)
		pause();
	if (c->ns) {
		struct timespec ts = { (time_t)(c->ns / 1000000000u), (long)(c->ns % 1000000000u) };
		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
	}
	memmove(c->dst, c->src, c->n);
}

/* $SIMCUDA_D2H_MBPS and $SIMCUDA_H2D_MBPS: a copy from device to host
 * memory, or from host to device memory, takes as long as it would over a
 * bus of that many MB/s (unset or 0: as long as memmove takes), so that a
 * test can see what happens while a copy runs; "hang": it never ends, as
 * on a GPU that hangs. */
static uint64_t bus_ns(const char *var, size_t n)
{
	const char *v = getenv(var);
	if (v && !strcmp(v, "hang"))
		return COPY_HANGS;
	unsigned long mbps = v ? strtoul(v, NULL, 10) : 0;
	return mbps ? (uint64_t)n * 1000u / mbps : 0;
}

typedef struct set_args {
	void *dst;
	uint32_t value;
	unsigned width;
	size_t count;
} set_args;

static void set_task(void *arg)
{
	set_args *s = arg;
	if (s->width == 1) {
		memset(s->dst, (int)(s->value & 0xff), s->count);
	} else if (s->width == 2) {
		uint16_t v = (uint16_t)s->value, *d = s->dst;
		for (size_t i = 0; i < s->count; i++)
			d[i] = v;
	} else {
		uint32_t *d = s->dst;
		for (size_t i = 0; i < s->count; i++)
			d[i] = s->value;
	}
}

/* Checks the device side(s) of a copy; a side that is not device memory is
 * host memory, which the caller vouches for. */
static CUresult check_copy(uintptr_t dst, bool dst_dev, uintptr_t src, bool src_dev, size_t n, bool peer)
{
	if (n == 0)
		return CUDA_SUCCESS;
	if (!dst || !src)
		return CUDA_ERROR_INVALID_VALUE;
	/* A peer copy names each side's context, and the driver stages it
	 * when it must; any other copy runs on the current device. */
	if (dst_dev && !(peer ? sc_mem_is_device(dst, n) : reachable(dst, n, true)))
		return CUDA_ERROR_INVALID_VALUE;
	if (src_dev && !(peer ? sc_mem_is_device(src, n) : reachable(src, n, true)))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

static CUresult copy(uintptr_t dst, bool dst_dev, uintptr_t src, bool src_dev, size_t n, CUstream s,
		     bool async, bool peer)
{
	CUresult r = sc_ctx_require();
	if (r)
		return r;
	r = check_copy(dst, dst_dev, src, src_dev, n, peer);
	if (r || n == 0)
		return r;
	uint64_t ns = src_dev && !dst_dev   ? bus_ns("SIMCUDA_D2H_MBPS", n)
		      : !src_dev && dst_dev ? bus_ns("SIMCUDA_H2D_MBPS", n)
					    : 0;
	copy_args c = { (void *)dst, (const void *)src, n, ns };
	if (async)
		return sc_stream_submit(s, copy_task, &c, sizeof(c));
	/* A synchronous copy is ordered after all earlier work. */
	sc_streams_drain();
	copy_task(&c);
	return CUDA_SUCCESS;
}

static CUresult set(CUdeviceptr dst, uint32_t value, unsigned width, size_t count, CUstream s, bool async)
{
	CUresult r = sc_ctx_require();
	if (r)
		return r;
	if (count == 0)
		return CUDA_SUCCESS;
	if (dst % width || count > SIZE_MAX / width || !reachable(dst, count * width, false))
		return CUDA_ERROR_INVALID_VALUE;
	set_args a = { (void *)dst, value, width, count };
	if (async)
		return sc_stream_submit(s, set_task, &a, sizeof(a));
	sc_streams_drain();
	set_task(&a);
	return CUDA_SUCCESS;
}

/* A 2D set: height rows, pitch bytes apart, of width elements each. */
typedef struct set2d_args {
	uint8_t *dst;
	size_t pitch, width, height;
	uint32_t value;
	unsigned elt;
} set2d_args;

static void set2d_task(void *arg)
{
	set2d_args *a = arg;
	for (size_t r = 0; r < a->height; r++) {
		set_args row = { a->dst + r * a->pitch, a->value, a->elt, a->width };
		set_task(&row);
	}
}

static CUresult set2d(CUdeviceptr dst, size_t pitch, uint32_t value, unsigned elt, size_t width, size_t height,
		      CUstream s, bool async)
{
	CUresult r = sc_ctx_require();
	if (r)
		return r;
	if (!width || !height)
		return CUDA_SUCCESS;
	if (dst % elt || pitch < width * elt || height > SIZE_MAX / pitch ||
	    !reachable(dst, (height - 1) * pitch + width * elt, false))
		return CUDA_ERROR_INVALID_VALUE;
	set2d_args a = { (uint8_t *)dst, pitch, width, height, value, elt };
	if (async)
		return sc_stream_submit(s, set2d_task, &a, sizeof(a));
	sc_streams_drain();
	set2d_task(&a);
	return CUDA_SUCCESS;
}

#define SET2D_API(name, vtype, elt, async, ...)                                                        \
	SC_EXPORT CUresult name(CUdeviceptr d, size_t pitch, vtype v, size_t w, size_t h __VA_ARGS__) \
	{                                                                                              \
		SC_API();                                                                              \
		return set2d(d, pitch, v, elt, w, h, SC_STREAM_ARG, async);                            \
	}
#define SC_STREAM_ARG 0
SET2D_API(cuMemsetD2D8_v2, unsigned char, 1, false)
SET2D_API(cuMemsetD2D16_v2, unsigned short, 2, false)
SET2D_API(cuMemsetD2D32_v2, unsigned int, 4, false)
#undef SC_STREAM_ARG
#define SC_STREAM_ARG st
SET2D_API(cuMemsetD2D8Async, unsigned char, 1, true, , CUstream st)
SET2D_API(cuMemsetD2D16Async, unsigned short, 2, true, , CUstream st)
SET2D_API(cuMemsetD2D32Async, unsigned int, 4, true, , CUstream st)
#undef SC_STREAM_ARG

static bool any_device(uintptr_t p)
{
	return sc_mem_is_device(p, 1);
}

#define COPY_API(name, params, dst, dd, src, sd, n, s, async)                 \
	SC_EXPORT CUresult name params                                        \
	{                                                                     \
		SC_API();                                                     \
		return copy((uintptr_t)(dst), dd, (uintptr_t)(src), sd, n, s, async, false); \
	}
#define COPY_PEER_API(name, params, s, async)                                 \
	SC_EXPORT CUresult name params                                        \
	{                                                                     \
		SC_API();                                                     \
		(void)dc;                                                     \
		(void)sc;                                                     \
		return copy((uintptr_t)d, true, (uintptr_t)src, true, n, s, async, true); \
	}

COPY_API(cuMemcpyHtoD_v2, (CUdeviceptr d, const void *h, size_t n), d, true, h, false, n, 0, false)
COPY_API(cuMemcpyDtoH_v2, (void *h, CUdeviceptr d, size_t n), h, false, d, true, n, 0, false)
COPY_API(cuMemcpyDtoD_v2, (CUdeviceptr d, CUdeviceptr s, size_t n), d, true, s, true, n, 0, false)
COPY_API(cuMemcpy, (CUdeviceptr d, CUdeviceptr s, size_t n), d, any_device(d), s, any_device(s), n, 0, false)
COPY_API(cuMemcpyHtoDAsync_v2, (CUdeviceptr d, const void *h, size_t n, CUstream st), d, true, h, false, n, st, true)
COPY_API(cuMemcpyDtoHAsync_v2, (void *h, CUdeviceptr d, size_t n, CUstream st), h, false, d, true, n, st, true)
COPY_API(cuMemcpyDtoDAsync_v2, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), d, true, s, true, n, st, true)
COPY_API(cuMemcpyAsync, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), d, any_device(d), s,
	 any_device(s), n, st, true)
/* Peer copies: simcuda's devices share one address space. */
COPY_PEER_API(cuMemcpyPeer, (CUdeviceptr d, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n), 0, false)
COPY_PEER_API(cuMemcpyPeerAsync, (CUdeviceptr d, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream st),
	      st, true)
COPY_PEER_API(cuMemcpyPeer_ptds, (CUdeviceptr d, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n), 0, false)
COPY_PEER_API(cuMemcpyPeerAsync_ptsz,
	      (CUdeviceptr d, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream st), st, true)
/* Per-thread default stream variants: simcuda's default stream already
 * orders against every stream, which is stricter than per-thread. */
COPY_API(cuMemcpyHtoD_v2_ptds, (CUdeviceptr d, const void *h, size_t n), d, true, h, false, n, 0, false)
COPY_API(cuMemcpyDtoH_v2_ptds, (void *h, CUdeviceptr d, size_t n), h, false, d, true, n, 0, false)
COPY_API(cuMemcpyDtoD_v2_ptds, (CUdeviceptr d, CUdeviceptr s, size_t n), d, true, s, true, n, 0, false)
COPY_API(cuMemcpy_ptds, (CUdeviceptr d, CUdeviceptr s, size_t n), d, any_device(d), s, any_device(s), n, 0, false)
COPY_API(cuMemcpyHtoDAsync_v2_ptsz, (CUdeviceptr d, const void *h, size_t n, CUstream st), d, true, h, false, n, st, true)
COPY_API(cuMemcpyDtoHAsync_v2_ptsz, (void *h, CUdeviceptr d, size_t n, CUstream st), h, false, d, true, n, st, true)
COPY_API(cuMemcpyDtoDAsync_v2_ptsz, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), d, true, s, true, n, st, true)
COPY_API(cuMemcpyAsync_ptsz, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), d, any_device(d), s,
	 any_device(s), n, st, true)

#define SET_API(name, vtype, width, async, ...)                               \
	SC_EXPORT CUresult name(CUdeviceptr d, vtype v, size_t n __VA_ARGS__) \
	{                                                                     \
		SC_API();                                                     \
		return set(d, v, width, n, SC_STREAM_ARG, async);             \
	}

#define SC_STREAM_ARG 0
SET_API(cuMemsetD8_v2, unsigned char, 1, false)
SET_API(cuMemsetD16_v2, unsigned short, 2, false)
SET_API(cuMemsetD32_v2, unsigned int, 4, false)
SET_API(cuMemsetD8_v2_ptds, unsigned char, 1, false)
SET_API(cuMemsetD16_v2_ptds, unsigned short, 2, false)
SET_API(cuMemsetD32_v2_ptds, unsigned int, 4, false)
#undef SC_STREAM_ARG
#define SC_STREAM_ARG st
SET_API(cuMemsetD8Async, unsigned char, 1, true, , CUstream st)
SET_API(cuMemsetD16Async, unsigned short, 2, true, , CUstream st)
SET_API(cuMemsetD32Async, unsigned int, 4, true, , CUstream st)
SET_API(cuMemsetD8Async_ptsz, unsigned char, 1, true, , CUstream st)
SET_API(cuMemsetD16Async_ptsz, unsigned short, 2, true, , CUstream st)
SET_API(cuMemsetD32Async_ptsz, unsigned int, 4, true, , CUstream st)
#undef SC_STREAM_ARG

/* ---- stream memory operations and batched copies ------------------------ */

/* cuda.h names the newest versions with these; each version is its own
 * entry point here. */
#undef cuStreamWriteValue32
#undef cuStreamWriteValue64
#undef cuStreamBatchMemOp
#undef cuMemcpyBatchAsync

typedef struct write_args {
	void *dst;
	uint64_t value;
	unsigned width; /* 4 or 8 */
} write_args;

static void write_task(void *arg)
{
	write_args *w = arg;
	if (w->width == 4) {
		uint32_t v = (uint32_t)w->value;
		memcpy(w->dst, &v, 4);
	} else {
		memcpy(w->dst, &w->value, 8);
	}
}

/* One write of 4 or 8 bytes, in stream order. */
static CUresult write_value(CUstream s, CUdeviceptr addr, uint64_t value, unsigned width)
{
	CUresult r = sc_ctx_require();
	if (r)
		return r;
	if (addr % width || !reachable(addr, width, false))
		return CUDA_ERROR_INVALID_VALUE;
	write_args w = { (void *)addr, value, width };
	return sc_stream_submit(s, write_task, &w, sizeof(w));
}

#define WRITE_API(name, vtype, width)                                                      \
	SC_EXPORT CUresult name(CUstream s, CUdeviceptr addr, vtype v, unsigned int flags); \
	SC_EXPORT CUresult name(CUstream s, CUdeviceptr addr, vtype v, unsigned int flags)  \
	{                                                                                  \
		SC_API();                                                                  \
		(void)flags;                                                               \
		return write_value(s, addr, v, width);                                     \
	}
WRITE_API(cuStreamWriteValue32, cuuint32_t, 4)
WRITE_API(cuStreamWriteValue32_ptsz, cuuint32_t, 4)
WRITE_API(cuStreamWriteValue32_v2, cuuint32_t, 4)
WRITE_API(cuStreamWriteValue32_v2_ptsz, cuuint32_t, 4)
WRITE_API(cuStreamWriteValue64, cuuint64_t, 8)
WRITE_API(cuStreamWriteValue64_ptsz, cuuint64_t, 8)
WRITE_API(cuStreamWriteValue64_v2, cuuint64_t, 8)
WRITE_API(cuStreamWriteValue64_v2_ptsz, cuuint64_t, 8)

/* Writes, barriers and flushes; waits are not simulated. */
static CUresult batch_memop(CUstream s, unsigned count, CUstreamBatchMemOpParams *ops)
{
	if (count && !ops)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < count; i++) {
		CUresult r = CUDA_SUCCESS;
		switch (ops[i].operation) {
		case CU_STREAM_MEM_OP_WRITE_VALUE_32:
			r = write_value(s, ops[i].writeValue.address, ops[i].writeValue.value, 4);
			break;
		case CU_STREAM_MEM_OP_WRITE_VALUE_64:
			r = write_value(s, ops[i].writeValue.address, ops[i].writeValue.value64, 8);
			break;
		case CU_STREAM_MEM_OP_BARRIER:
		case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
			break;
		default:
			sc_log("cuStreamBatchMemOp: operation %d is not simulated", (int)ops[i].operation);
			return CUDA_ERROR_NOT_SUPPORTED;
		}
		if (r)
			return r;
	}
	return CUDA_SUCCESS;
}

#define BATCH_MEMOP_API(name)                                                                           \
	SC_EXPORT CUresult name(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags); \
	SC_EXPORT CUresult name(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags)  \
	{                                                                                               \
		SC_API();                                                                               \
		(void)flags;                                                                            \
		return batch_memop(s, count, ops);                                                      \
	}
BATCH_MEMOP_API(cuStreamBatchMemOp)
BATCH_MEMOP_API(cuStreamBatchMemOp_ptsz)
BATCH_MEMOP_API(cuStreamBatchMemOp_v2)
BATCH_MEMOP_API(cuStreamBatchMemOp_v2_ptsz)

/* Each copy of the batch in stream order; the attributes are hints. */
static CUresult memcpy_batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, size_t numAttrs,
			     size_t *failIdx, CUstream s)
{
	if (!count || !dsts || !srcs || !sizes || !numAttrs)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++) {
		CUresult r = copy(dsts[i], any_device(dsts[i]), srcs[i], any_device(srcs[i]), sizes[i], s, true, false);
		if (r) {
			if (failIdx)
				*failIdx = i;
			return r;
		}
	}
	return CUDA_SUCCESS;
}

#define MEMCPY_BATCH_API(name)                                                                        \
	SC_EXPORT CUresult name(CUdeviceptr *d, CUdeviceptr *s, size_t *n, size_t count, CUmemcpyAttributes *a, \
				size_t *ai, size_t na, CUstream st);                                  \
	SC_EXPORT CUresult name(CUdeviceptr *d, CUdeviceptr *s, size_t *n, size_t count, CUmemcpyAttributes *a, \
				size_t *ai, size_t na, CUstream st)                                   \
	{                                                                                             \
		SC_API();                                                                             \
		(void)a;                                                                              \
		(void)ai;                                                                             \
		return memcpy_batch(d, s, n, count, na, NULL, st);                                    \
	}
#define MEMCPY_BATCH_FAIL_API(name)                                                                   \
	SC_EXPORT CUresult name(CUdeviceptr *d, CUdeviceptr *s, size_t *n, size_t count, CUmemcpyAttributes *a, \
				size_t *ai, size_t na, size_t *fail, CUstream st);                    \
	SC_EXPORT CUresult name(CUdeviceptr *d, CUdeviceptr *s, size_t *n, size_t count, CUmemcpyAttributes *a, \
				size_t *ai, size_t na, size_t *fail, CUstream st)                     \
	{                                                                                             \
		SC_API();                                                                             \
		(void)a;                                                                              \
		(void)ai;                                                                             \
		return memcpy_batch(d, s, n, count, na, fail, st);                                    \
	}
MEMCPY_BATCH_FAIL_API(cuMemcpyBatchAsync)
MEMCPY_BATCH_FAIL_API(cuMemcpyBatchAsync_ptsz)
MEMCPY_BATCH_API(cuMemcpyBatchAsync_v2)
MEMCPY_BATCH_API(cuMemcpyBatchAsync_v2_ptsz)
