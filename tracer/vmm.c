/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The application's own VMM allocations: handles it made with cuMemCreate
 * (to which the tracer added the POSIX fd handle type) and where it mapped
 * them. Parking exports each handle, unmaps its mappings and releases it;
 * unparking imports the same fd and maps it again where it was, with the
 * same access.
 *
 * The application keeps the handle values it was given, which the driver
 * no longer knows after an unpark: the wrappers translate them to the
 * current handle. From then on the driver holds one reference, and the
 * application's retains and releases are counted here.
 *
 * Memory another process exported and this one imported from a POSIX fd
 * (NCCL's buffers between ranks) is parked the same way: the import's fd
 * is kept (a dup, taken at the import), handed over, unmapped and
 * released, and imported and mapped again at unpark. phosfs matches it to
 * the owner's object, so the driver never sees memory two processes
 * share. Every fd of the driver's is an open of /dev/nvidiactl, one like
 * another: only the open file itself, passed from owner to importer,
 * tells which memory it is. So the owner keeps a dup of each fd the
 * application exports, and hands those over too (WIRE_OBJ_ALIAS), for
 * phosfs to compare (kcmp) with the importer's.
 *
 * A handle the application released while it is mapped is no longer its
 * to name: the driver may give the same value to a new one. Such a
 * record (refs 0) is found by its mappings only.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tracer.h"

#define MAX_ACCESS 4

typedef struct handle_rec {
	CUmemGenericAllocationHandle app; /* the value the application holds */
	CUmemGenericAllocationHandle cur; /* the driver's handle now; 0 while parked */
	uint64_t size;
	CUdevice dev;
	int refs;          /* references the application holds */
	bool counted_here; /* after an unpark: the driver holds 1, refs is ours */
	int kept;          /* the fd it came back with, plus 1: see alloc.c */
	bool imported;     /* another process's memory, from a POSIX fd */
	bool host;         /* made at a host location: dev is its NUMA node */
	int *exp;          /* dups of the fds the application exported of it */
	uint32_t nexp, expcap;
	bool live;
} handle_rec;

typedef struct mapping {
	uint64_t va, size, offset;
	uint32_t h; /* handle_rec index */
	CUmemAccessDesc acc[MAX_ACCESS];
	int nacc;
	bool live;
} mapping;

/* Guarded by lock. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static handle_rec *hs;
static uint32_t nh, hcap;
static mapping *ms;
static uint32_t nm, mcap;
static bool parked;
/* Device memory another process exported that cannot be parked: handles
 * imported from other than a POSIX fd and not yet released, and where
 * they (or cuIpcOpenMemHandle) mapped it. */
static CUmemGenericAllocationHandle *imp;
static uint32_t nimp, impcap;
typedef struct shared_map {
	uint64_t va, size;
} shared_map;
static shared_map *smap;
static uint32_t nsmap, smapcap;

bool tr_push(void *arr, uint32_t *n, uint32_t *cap, const void *v, size_t size)
{
	if (*n == *cap) {
		uint32_t c = *cap ? *cap * 2 : 16;
		void *p = realloc(*(void **)arr, c * size);
		if (!p)
			return false;
		*(void **)arr = p;
		*cap = c;
	}
	memcpy((char *)*(void **)arr + (size_t)*n * size, v, size);
	(*n)++;
	return true;
}

static int find_import(CUmemGenericAllocationHandle h)
{
	for (uint32_t i = 0; i < nimp; i++)
		if (imp[i] == h)
			return (int)i;
	return -1;
}

static void note_shared(uint64_t va, uint64_t size)
{
	shared_map m = { va, size };
	if (!tr_push(&smap, &nsmap, &smapcap, &m, sizeof(m)))
		alloc_mark_stop_only("tracer out of memory", "out of memory for the table of its shared device memory");
}

/* Forgets the shared mappings within [va, va+size) (size 0: the one at va). */
static void forget_shared(uint64_t va, uint64_t size)
{
	for (uint32_t k = 0; k < nsmap;)
		if (size ? smap[k].va >= va && smap[k].va + smap[k].size <= va + size : smap[k].va == va)
			smap[k] = smap[--nsmap];
		else
			k++;
}

static void add_handle(const handle_rec *r)
{
	if (!tr_push(&hs, &nh, &hcap, r, sizeof(*r))) {
		if (r->kept)
			close(r->kept - 1);
		alloc_mark_stop_only("tracer out of memory", "out of memory for the table of its VMM allocations");
	}
}

void vmm_imported(CUmemGenericAllocationHandle h, CUmemAllocationHandleType type, void *os)
{
	REAL(CUresult, cuMemGetAllocationPropertiesFromHandle, (CUmemAllocationProp *, CUmemGenericAllocationHandle));
	int kept = -1;
	CUmemAllocationProp prop = { 0 };
	if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR &&
	    real_cuMemGetAllocationPropertiesFromHandle(&prop, h) == CUDA_SUCCESS &&
	    prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE)
		kept = fcntl((int)(intptr_t)os, F_DUPFD_CLOEXEC, 3);
	pthread_mutex_lock(&lock);
	if (kept >= 0) {
		handle_rec r = { .app = h, .cur = h, .dev = prop.location.id, .refs = 1, .kept = kept + 1,
				 .imported = true, .live = true };
		add_handle(&r);
	} else if (!tr_push(&imp, &nimp, &impcap, &h, sizeof(h))) {
		alloc_mark_stop_only("tracer out of memory", "out of memory for the table of its imported device memory");
	}
	pthread_mutex_unlock(&lock);
}

void vmm_ipc_opened(CUdeviceptr va, bool open)
{
	pthread_mutex_lock(&lock);
	if (open)
		note_shared(va, 0);
	else
		forget_shared(va, 0);
	pthread_mutex_unlock(&lock);
}

bool vmm_shared(char *why, size_t n)
{
	pthread_mutex_lock(&lock);
	uint32_t k = nsmap;
	pthread_mutex_unlock(&lock);
	if (k)
		snprintf(why, n,
			 "it maps memory an untraced process shared with a CUDA IPC handle of the driver's (%u "
			 "mapping%s, cuIpcOpenMemHandle), which the driver's checkpoint cannot restore",
			 k, k > 1 ? "s" : "");
	return k > 0;
}

static int find_handle(CUmemGenericAllocationHandle app)
{
	for (uint32_t i = 0; i < nh; i++)
		if (hs[i].live && hs[i].refs > 0 && hs[i].app == app)
			return (int)i;
	return -1;
}

/* Closes the dups of h's exports. */
static void close_exports(handle_rec *h)
{
	for (uint32_t k = 0; k < h->nexp; k++)
		close(h->exp[k]);
	h->nexp = 0;
}

/* Where handle h is mapped first; 0 if nowhere. */
static uint64_t va_of(uint32_t h)
{
	for (uint32_t i = 0; i < nm; i++)
		if (ms[i].live && ms[i].h == h)
			return ms[i].va;
	return 0;
}

/* Keeps a dup of fd, an open file the application exported of h. */
static void keep_export(handle_rec *h, int fd)
{
	int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (d >= 0 && !tr_push(&h->exp, &h->nexp, &h->expcap, &d, sizeof(d)))
		close(d);
}

/* Forgets a handle that is released and mapped nowhere. */
static void maybe_forget(uint32_t h)
{
	if (hs[h].refs <= 0 && !va_of(h)) {
		if (hs[h].kept)
			close(hs[h].kept - 1);
		hs[h].kept = 0;
		close_exports(&hs[h]);
		free(hs[h].exp);
		hs[h].exp = NULL;
		hs[h].expcap = 0;
		hs[h].live = false;
	}
}

void vmm_created(CUmemGenericAllocationHandle h, uint64_t size, CUmemLocation where)
{
	handle_rec r = { .app = h, .cur = h, .size = size, .dev = where.id, .refs = 1, .live = true,
			 .host = where.type != CU_MEM_LOCATION_TYPE_DEVICE };
	pthread_mutex_lock(&lock);
	add_handle(&r);
	pthread_mutex_unlock(&lock);
}

void vmm_exported(CUmemGenericAllocationHandle app, int fd)
{
	pthread_mutex_lock(&lock);
	int i = find_handle(app);
	if (i >= 0) /* else not the application's own: its importer is refused */
		keep_export(&hs[i], fd);
	pthread_mutex_unlock(&lock);
}

CUmemGenericAllocationHandle vmm_current(CUmemGenericAllocationHandle app)
{
	pthread_mutex_lock(&lock);
	int i = find_handle(app);
	CUmemGenericAllocationHandle cur = i >= 0 ? hs[i].cur : app;
	pthread_mutex_unlock(&lock);
	return cur;
}

CUresult vmm_release(CUmemGenericAllocationHandle app)
{
	REAL(CUresult, cuMemRelease, (CUmemGenericAllocationHandle));
	pthread_mutex_lock(&lock);
	int i = find_handle(app);
	CUresult r = CUDA_SUCCESS;
	int k = i < 0 ? find_import(app) : -1;
	if (i < 0) {
		r = real_cuMemRelease(app);
		if (r == CUDA_SUCCESS && k >= 0)
			imp[k] = imp[--nimp];
	} else if (hs[i].counted_here) {
		if (--hs[i].refs == 0)
			r = real_cuMemRelease(hs[i].cur);
		maybe_forget((uint32_t)i);
	} else {
		r = real_cuMemRelease(hs[i].cur);
		if (r == CUDA_SUCCESS) {
			hs[i].refs--;
			maybe_forget((uint32_t)i);
		}
	}
	pthread_mutex_unlock(&lock);
	return r;
}

CUresult vmm_map(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle app,
		 unsigned long long flags)
{
	REAL(CUresult, cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long));
	pthread_mutex_lock(&lock);
	int i = find_handle(app);
	CUresult r = real_cuMemMap(va, size, offset, i >= 0 ? hs[i].cur : app, flags);
	if (r == CUDA_SUCCESS && i < 0 && find_import(app) >= 0)
		note_shared(va, size);
	if (r == CUDA_SUCCESS && i >= 0) {
		if (nm == mcap) {
			uint32_t cap = mcap ? mcap * 2 : 64;
			mapping *v = realloc(ms, cap * sizeof(*v));
			if (v) {
				ms = v;
				mcap = cap;
			}
		}
		if (nm < mcap) {
			ms[nm++] = (mapping){ .va = va, .size = size, .offset = offset, .h = (uint32_t)i, .live = true };
			if (hs[i].imported && offset + size > hs[i].size)
				hs[i].size = offset + size; /* at least: its owner knows */
			alloc_add_mapping(va, size, hs[i].host ? 0 : (uint32_t)hs[i].dev);
		} else
			alloc_mark_stop_only("tracer out of memory", "out of memory for the table of its VMM mappings");
	}
	pthread_mutex_unlock(&lock);
	return r;
}

CUresult vmm_unmap(CUdeviceptr va, size_t size)
{
	REAL(CUresult, cuMemUnmap, (CUdeviceptr, size_t));
	pthread_mutex_lock(&lock);
	CUresult r = real_cuMemUnmap(va, size);
	if (r == CUDA_SUCCESS) {
		/* Whatever is mapped there next is not the t1 memory. */
		cow_freed(va, size);
		alloc_remove_mappings(va, size);
		forget_shared(va, size);
		for (uint32_t k = 0; k < nm; k++) {
			if (ms[k].live && ms[k].va >= va && ms[k].va + ms[k].size <= va + size) {
				ms[k].live = false;
				maybe_forget(ms[k].h);
			}
		}
	}
	pthread_mutex_unlock(&lock);
	return r;
}

void vmm_set_access(CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	pthread_mutex_lock(&lock);
	for (uint32_t k = 0; k < nm; k++) {
		mapping *m = &ms[k];
		if (!m->live || m->va + m->size <= va || m->va >= va + size)
			continue;
		for (size_t d = 0; d < count; d++) {
			int j = 0;
			while (j < m->nacc && (m->acc[j].location.type != desc[d].location.type ||
					       m->acc[j].location.id != desc[d].location.id))
				j++;
			if (j < MAX_ACCESS) {
				m->acc[j] = desc[d];
				if (j == m->nacc)
					m->nacc++;
			}
		}
	}
	pthread_mutex_unlock(&lock);
}

/* The application asks for the handle of what is mapped at addr. */
CUresult vmm_retain(CUmemGenericAllocationHandle *out, void *addr)
{
	REAL(CUresult, cuMemRetainAllocationHandle, (CUmemGenericAllocationHandle *, void *));
	REAL(CUresult, cuMemRelease, (CUmemGenericAllocationHandle));
	CUmemGenericAllocationHandle cur;
	CUresult r = real_cuMemRetainAllocationHandle(&cur, addr);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&lock);
	int i = -1;
	for (uint32_t k = 0; k < nh && i < 0; k++)
		if (hs[k].live && hs[k].cur == cur)
			i = (int)k;
	if (i >= 0) {
		if (hs[i].counted_here)
			real_cuMemRelease(cur); /* the driver keeps its one reference */
		if (hs[i].refs <= 0)
			hs[i].app = cur; /* its old value may name another now */
		hs[i].refs++;
		*out = hs[i].app;
	} else {
		*out = cur;
	}
	pthread_mutex_unlock(&lock);
	return CUDA_SUCCESS;
}

int vmm_export(alloc_emit_fn emit, void *arg)
{
	REAL(CUresult, cuMemExportToShareableHandle,
	     (void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long));
	REAL(CUresult, cuMemRetainAllocationHandle, (CUmemGenericAllocationHandle *, void *));
	REAL(CUresult, cuMemRelease, (CUmemGenericAllocationHandle));
	pthread_mutex_lock(&lock);
	obj_batch batch;
	batch_init(&batch, emit, arg);
	int e = 0;
	for (uint32_t i = 0; i < nh && !e && !batch.err; i++) {
		if (!hs[i].live)
			continue;
		uint64_t va = va_of(i);
		int fd = -1;
		if (hs[i].kept) {
			fd = fcntl(hs[i].kept - 1, F_DUPFD_CLOEXEC, 3);
		} else {
			/* A handle the application released once it was mapped
			 * is the driver's no more: the mapping gives one. */
			CUmemGenericAllocationHandle h = hs[i].cur, got = 0;
			if (hs[i].refs <= 0 && !hs[i].counted_here && va &&
			    real_cuMemRetainAllocationHandle(&got, (void *)(uintptr_t)va) == CUDA_SUCCESS)
				h = got;
			if (real_cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0))
				fd = -1;
			if (got)
				real_cuMemRelease(got);
		}
		if (fd < 0) {
			e = -EIO;
			break;
		}
		wire_object rec = { .key = i, .va = va, .size = hs[i].size, .device = (uint32_t)hs[i].dev,
				    .flags = WIRE_OBJ_APP | (hs[i].imported ? WIRE_OBJ_IMPORTED : 0) };
		if (hs[i].host) { /* any GPU copies it; the node is kept */
			rec.device = 0;
			rec.flags |= WIRE_OBJ_HOST | ((uint32_t)hs[i].dev & 0xffu) << 16;
		}
		batch_add(&batch, &rec, fd);
		rec.flags = WIRE_OBJ_APP | WIRE_OBJ_ALIAS;
		for (uint32_t k = 0; k < hs[i].nexp && !batch.err; k++) {
			int d = fcntl(hs[i].exp[k], F_DUPFD_CLOEXEC, 3);
			if (d < 0) {
				e = -EMFILE;
				break;
			}
			batch_add(&batch, &rec, d);
		}
	}
	int be = batch_finish(&batch);
	pthread_mutex_unlock(&lock);
	return e ? e : be;
}

void vmm_let_go(void)
{
	REAL(CUresult, cuMemUnmap, (CUdeviceptr, size_t));
	REAL(CUresult, cuMemRelease, (CUmemGenericAllocationHandle));
	pthread_mutex_lock(&lock);
	for (uint32_t k = 0; k < nm; k++)
		if (ms[k].live)
			real_cuMemUnmap(ms[k].va, ms[k].size);
	for (uint32_t i = 0; i < nh; i++) {
		if (!hs[i].live)
			continue;
		int held = hs[i].counted_here ? 1 : hs[i].refs;
		for (int k = 0; k < held; k++)
			real_cuMemRelease(hs[i].cur);
		hs[i].cur = 0;
		if (hs[i].kept)
			close(hs[i].kept - 1); /* phosfs holds the memory now */
		hs[i].kept = 0;
		close_exports(&hs[i]); /* and these, to give back */
	}
	parked = true;
	pthread_mutex_unlock(&lock);
}

int vmm_unpark(const wire_object *recs, const int *fds, int n)
{
	REAL(CUresult, cuMemImportFromShareableHandle,
	     (CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType));
	REAL(CUresult, cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long));
	REAL(CUresult, cuMemSetAccess, (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t));
	pthread_mutex_lock(&lock);
	int e = 0;
	for (int k = 0; k < n && !e; k++) {
		if (!(recs[k].flags & WIRE_OBJ_APP))
			continue;
		uint64_t i = recs[k].key;
		if ((recs[k].flags & WIRE_OBJ_ALIAS) && i < nh && hs[i].live) {
			keep_export(&hs[i], fds[k]);
			continue;
		}
		if (i >= nh || !hs[i].live || hs[i].cur || !(recs[k].flags & WIRE_OBJ_IMPORTED) != !hs[i].imported ||
		    (hs[i].imported ? recs[k].size < hs[i].size : hs[i].size != recs[k].size)) {
			e = -ENOENT;
			break;
		}
		CUmemGenericAllocationHandle h;
		if (real_cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fds[k],
							CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
			e = -EIO;
			break;
		}
		hs[i].cur = h;
		hs[i].counted_here = true;
		int kept = fcntl(fds[k], F_DUPFD_CLOEXEC, 3);
		hs[i].kept = kept >= 0 ? kept + 1 : 0;
		for (uint32_t m = 0; m < nm && !e; m++) {
			if (!ms[m].live || ms[m].h != i)
				continue;
			if (real_cuMemMap(ms[m].va, ms[m].size, ms[m].offset, h, 0) ||
			    (ms[m].nacc && real_cuMemSetAccess(ms[m].va, ms[m].size, ms[m].acc, (size_t)ms[m].nacc)))
				e = -EIO;
		}
	}
	bool all = true;
	for (uint32_t i = 0; i < nh; i++)
		all &= !hs[i].live || hs[i].cur != 0;
	if (all)
		parked = false;
	pthread_mutex_unlock(&lock);
	return e;
}

bool vmm_missing(char *what, size_t n)
{
	pthread_mutex_lock(&lock);
	uint32_t i = 0;
	while (i < nh && !(hs[i].live && !hs[i].cur))
		i++;
	if (i < nh)
		snprintf(what, n, "its VMM %s %u (%llu bytes at 0x%llx)", hs[i].imported ? "import" : "allocation", i,
			 (unsigned long long)hs[i].size, (unsigned long long)va_of(i));
	pthread_mutex_unlock(&lock);
	return i < nh;
}

bool vmm_parked(void)
{
	pthread_mutex_lock(&lock);
	bool p = parked;
	pthread_mutex_unlock(&lock);
	return p;
}

void vmm_forget_fds(void)
{
	/* As alloc_forget_fds: in a forked child, without the lock. */
	for (uint32_t i = 0; i < nh; i++) {
		if (hs[i].kept)
			close(hs[i].kept - 1);
		hs[i].kept = 0;
		close_exports(&hs[i]);
	}
}
