/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The tracer's side of a copy-on-write checkpoint (common/cow.h).
 *
 * After a CoW stall the process runs while phosfs copies its t1 memory.
 * Before each call that writes device memory, the chunks of the t1
 * objects it writes are protected:
 *  - a chunk not yet copied is copied device to device into a slot of the
 *    shadow pool, on the call's own stream, ahead of the call; a host
 *    function queued after that copy marks the shadow complete; the
 *    chunks of one call that go to consecutive slots go in one copy;
 *  - a chunk phosfs is copying makes the call wait;
 *  - with no free slot (or no pool on the chunk's device), the call marks
 *    the chunk urgent, which phosfs copies next, and waits for it.
 * A call whose write set speculation cannot bound (the safety net) waits
 * until every t1 byte is off the GPU.
 *
 * The table and the pool stay mapped until phosfs ends the copy (or its
 * job dies); a reaper thread then unmaps them, once no shadow copy is
 * still queued.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../common/cow.h"
#include "tracer.h"

/* The table; the pool and shadow_on are guarded by its lock too. */
static tr_table tab = TR_TABLE_INIT;
static CUdeviceptr pool_va;
static CUmemGenericAllocationHandle pool_h;
/* Per chunk: the stream its shadow copy was queued on, encoded as the
 * handle + 1 (0: none yet). A write on that stream runs after the copy;
 * a write on another one waits until the copy is done. */
static _Atomic uintptr_t *shadow_on;

/* After the copy: how long an allocation that failed for want of device
 * memory is tried again while the pool goes, and how often. */
#define OOM_GRACE_MS 2000
#define OOM_RETRY_MS 20

static bool dropped(int ms);

/* Whether the copy still runs. */
static bool running(cow_header *t)
{
	return atomic_load(&t->active) != 0;
}

/* A copy whose job is gone (its pidfd is readable) has ended: nothing
 * will move any more, so it is marked ended. Whether it had ended. */
static bool job_ended(cow_header *t)
{
	table_job_gone(&tab, t, "the checkpoint's copy", "writes go on unprotected");
	return !running(t);
}

/* Sleeps until progress moves from seen (or a slice passes, when it
 * checks that the copy's job still runs). */
static void wait_progress(cow_header *t, uint32_t seen)
{
	table_wait(t, seen);
	if (atomic_load(&t->progress) == seen)
		job_ended(t);
}

/* Shadow copies queued as one: chunks [chunk, chunk+n) of object o into
 * slots [slot, slot+n), bytes [off, off+len) of o. A write to a whole
 * pool (an XLA or PyTorch arena: every argument points into it) is one
 * device-to-device copy and one host function, not one per chunk. */
typedef struct shadow_run {
	uint64_t chunk, off, len;
	uint32_t slot, n;
} shadow_run;

/* What shadow_done marks: n chunk states from st. */
typedef struct shadow_mark {
	_Atomic uint32_t *st;
	uint32_t n;
} shadow_mark;

/* Marks n shadows from st complete. */
static void mark_shadowed(_Atomic uint32_t *st, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t s = atomic_load(&st[i]);
		while ((s & COW_STATE_MASK) == COW_SHADOWING &&
		       !atomic_compare_exchange_weak(&st[i], &s, (s & ~COW_STATE_MASK) | COW_SHADOWED))
			;
	}
	cow_header *t = atomic_load(&tab.t);
	if (t)
		table_bump(t);
}

/* Host function queued after a run's copy: its shadows are complete. */
static void shadow_done(void *arg)
{
	shadow_mark *m = arg;
	mark_shadowed(m->st, m->n);
	free(m);
}

/* Host function queued after one chunk's copy (when no mark could be
 * allocated for its run): the shadow is complete. */
static void chunk_shadowed(void *arg)
{
	mark_shadowed(arg, 1);
}

static uint32_t take_slot(cow_header *t)
{
	_Atomic uint64_t *bits = cow_slots(t);
	for (uint32_t w = 0; w < (t->nslots + 63) / 64; w++) {
		uint64_t v = atomic_load(&bits[w]);
		while (~v) {
			int b = __builtin_ctzll(~v);
			uint32_t slot = w * 64 + (uint32_t)b;
			if (slot >= t->nslots)
				break;
			if (atomic_compare_exchange_weak(&bits[w], &v, v | (1ull << b)))
				return slot;
		}
	}
	return COW_NO_SLOT;
}

static void give_slot(cow_header *t, uint32_t slot)
{
	atomic_fetch_and(&cow_slots(t)[slot / 64], ~(1ull << (slot % 64)));
}

/* Queues run r's copy on stream s, then its end mark. Returns false if
 * it could not: its chunks are PENDING again (their slots kept for good,
 * since a copy may still land), and must be protected another way. */
static bool flush(cow_header *t, const cow_object *o, shadow_run *r, CUstream s)
{
	REAL(CUresult, cuMemcpyDtoDAsync_v2, (CUdeviceptr, CUdeviceptr, size_t, CUstream));
	REAL(CUresult, cuLaunchHostFunc, (CUstream, CUhostFn, void *));
	if (!r->n)
		return true;
	_Atomic uint32_t *st = &cow_chunks(t)[r->chunk];
	CUresult res = real_cuMemcpyDtoDAsync_v2(pool_va + (uint64_t)r->slot * t->chunk, o->va + r->off, r->len, s);
	shadow_mark *m = res ? NULL : malloc(sizeof(*m));
	if (m) {
		*m = (shadow_mark){ st, r->n };
		res = real_cuLaunchHostFunc(s, shadow_done, m);
		if (res)
			free(m);
	} else {
		for (uint32_t i = 0; !res && i < r->n; i++)
			res = real_cuLaunchHostFunc(s, chunk_shadowed, (void *)&st[i]);
	}
	if (!res) {
		atomic_fetch_add(&t->shadows, r->n);
		atomic_fetch_add(&t->shadow_bytes, r->len);
		r->n = 0;
		return true;
	}
	tr_log("a CoW shadow copy failed (error %d): the call waits for the copy", (int)res);
	for (uint32_t i = 0; i < r->n; i++) {
		uint32_t v = atomic_load(&st[i]);
		while ((v & COW_STATE_MASK) == COW_SHADOWING &&
		       !atomic_compare_exchange_weak(&st[i], &v, (v & (COW_DIRTY | COW_URGENT)) | COW_PENDING))
			;
	}
	table_bump(t);
	return false;
}

static void protect(cow_header *t, const cow_object *o, uint64_t c, CUstream s, shadow_run *run);

/* Queues run's copy; where it cannot be, protects its chunks by waiting. */
static void flush_or_wait(cow_header *t, const cow_object *o, shadow_run *run, CUstream s)
{
	shadow_run r = *run;
	if (!flush(t, o, run, s)) {
		run->n = 0;
		for (uint32_t i = 0; i < r.n; i++)
			protect(t, o, r.chunk + i, s, NULL);
	}
}

/* Adds chunk c (its slot taken and its state SHADOWING) to run, which
 * is queued first when c does not extend it. */
static void add_to_run(cow_header *t, const cow_object *o, shadow_run *run, uint64_t c, uint32_t slot, CUstream s)
{
	uint64_t off = (c - o->first) * (uint64_t)t->chunk;
	uint64_t len = o->size - off < t->chunk ? o->size - off : t->chunk;
	if (run->n && c == run->chunk + run->n && slot == run->slot + run->n) {
		run->n++;
		run->len += len;
		return;
	}
	flush_or_wait(t, o, run, s);
	*run = (shadow_run){ .chunk = c, .off = off, .len = len, .slot = slot, .n = 1 };
}

/* Protects chunk c (of object o) from a write queued next on stream s if
 * that needs no wait: true when its t1 bytes are safe, or its shadow copy
 * is added to run (NULL: no shadow); false when it must wait (a chunk
 * phosfs copies, or one no slot is left for, which is marked urgent:
 * phosfs copies it next). */
static bool protect_now(cow_header *t, const cow_object *o, uint64_t c, CUstream s, shadow_run *run)
{
	_Atomic uint32_t *st = &cow_chunks(t)[c];
	for (;;) {
		uint32_t v = atomic_load(st);
		uint32_t state = v & COW_STATE_MASK;
		if (state == COW_SHADOWING && atomic_load(&shadow_on[c]) == (uintptr_t)s + 1)
			return true;
		if (state != COW_PENDING && state != COW_COPYING && state != COW_SHADOWING)
			return true;
		if (!running(t) && state != COW_SHADOWING)
			return true;
		if (run && state == COW_PENDING && o->device == t->pool_device) {
			uint32_t slot = take_slot(t);
			if (slot != COW_NO_SLOT) {
				atomic_store(&shadow_on[c], (uintptr_t)s + 1);
				if (!atomic_compare_exchange_strong(st, &v, COW_SHADOWING | (slot << COW_SLOT_SHIFT))) {
					give_slot(t, slot);
					continue; /* phosfs took it meanwhile */
				}
				add_to_run(t, o, run, c, slot, s);
				return true;
			}
		}
		if (state == COW_PENDING && !(v & COW_URGENT)) {
			if (!atomic_compare_exchange_strong(st, &v, v | COW_URGENT))
				continue;
			atomic_fetch_add(&t->urgent, 1);
			table_bump(t);
		}
		return false;
	}
}

/* Protects chunk c (of object o) from a write queued next on stream s.
 * Returns once the chunk's t1 bytes are safe, or, with run, once its
 * shadow copy is added to run, which the caller queues (flush_or_wait)
 * before the write; before any wait, run is queued. Without run the
 * chunk is not shadowed. */
static void protect(cow_header *t, const cow_object *o, uint64_t c, CUstream s, shadow_run *run)
{
	uint64_t waited_from = 0;
	for (;;) {
		uint32_t seen = atomic_load(&t->progress);
		if (protect_now(t, o, c, s, run))
			break;
		/* Waits come next: what this call queued so far goes first. */
		if (run && run->n) {
			flush_or_wait(t, o, run, s);
			continue;
		}
		if (!waited_from)
			waited_from = table_now_ns();
		wait_progress(t, seen);
	}
	if (waited_from) {
		atomic_fetch_add(&t->waits, 1);
		atomic_fetch_add(&t->wait_ns, table_now_ns() - waited_from);
	}
}

bool cow_active(void)
{
	return atomic_load_explicit(&tab.t, memory_order_acquire) != NULL;
}

/* Whether s is capturing a graph: its work runs at the graph's launch,
 * which the safety net holds, not now. */
static bool capturing(CUstream s)
{
	REAL(CUresult, cuStreamIsCapturing, (CUstream, CUstreamCaptureStatus *));
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	return real_cuStreamIsCapturing && real_cuStreamIsCapturing(s, &st) == CUDA_SUCCESS &&
	       st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* TRACK: marks the chunks of [addr, addr+len) of object o written. */
static void mark_dirty(cow_header *t, const cow_object *o, uint64_t a, uint64_t b)
{
	for (uint64_t c = a / t->chunk; c * t->chunk < b; c++)
		atomic_fetch_or(&cow_chunks(t)[o->first + c], COW_DIRTY);
}

void cow_before_write(uint64_t addr, uint64_t len, CUstream s)
{
	if (!cow_active() || !len || !addr)
		return;
	/* A capturing stream's work runs at the graph's launch, which the
	 * safety net holds (CoW) or marks everything (TRACK). */
	if (capturing(s))
		return;
	pthread_rwlock_rdlock(&tab.lock);
	cow_header *t = atomic_load(&tab.t);
	if (t && atomic_load(&t->active)) {
		const cow_object *objs = cow_objects(t);
		uint64_t end = addr + len;
		for (uint32_t i = table_first_above(t, addr); i < t->nobjs && objs[i].va < end; i++) {
			const cow_object *o = &objs[i];
			if (atomic_load(&o->freed))
				continue;
			uint64_t a = addr > o->va ? addr - o->va : 0;
			uint64_t b = end - o->va < o->size ? end - o->va : o->size;
			if (t->mode == COW_MODE_TRACK) {
				mark_dirty(t, o, a, b);
				continue;
			}
			/* First what needs no wait, all of it (a whole arena's
			 * chunks in one copy, those no slot is left for marked
			 * urgent at once); then the waits, each for what is left. */
			shadow_run run = { 0 };
			bool wait = false;
			for (uint64_t c = a / t->chunk; c * t->chunk < b; c++)
				wait |= !protect_now(t, o, o->first + c, s, &run);
			for (uint64_t c = a / t->chunk; wait && c * t->chunk < b; c++)
				protect(t, o, o->first + c, s, &run);
			flush_or_wait(t, o, &run, s);
		}
	}
	pthread_rwlock_unlock(&tab.lock);
}

/* Waits until every t1 byte of t is off the GPU, or the copy ends; the
 * nanoseconds it waited (0: none). Lock held for reading. */
static uint64_t wait_all_off(cow_header *t)
{
	uint64_t from = 0;
	while (running(t) && atomic_load(&t->off) < t->nchunks) {
		uint32_t seen = atomic_load(&t->progress);
		if (atomic_load(&t->off) >= t->nchunks)
			break;
		if (!from)
			from = table_now_ns();
		wait_progress(t, seen);
	}
	return from ? table_now_ns() - from : 0;
}

void cow_net(kernel_info *k)
{
	if (!cow_active())
		return;
	pthread_rwlock_rdlock(&tab.lock);
	cow_header *t = atomic_load(&tab.t);
	if (t && t->mode == COW_MODE_TRACK) {
		/* Whatever it writes, the final stall copies everything again. */
		atomic_store(&t->all_dirty, 1);
		t = NULL;
	}
	uint64_t ns = t ? wait_all_off(t) : 0;
	if (ns) {
		atomic_fetch_add(&t->net_waits, 1);
		atomic_fetch_add(&t->net_wait_ns, ns);
		if (k)
			atomic_fetch_add_explicit(&k->net_waits, 1, memory_order_relaxed);
	}
	pthread_rwlock_unlock(&tab.lock);
}

/* When a shadow pool was last let go of here (0: never). */
static _Atomic uint64_t pool_gone_ns;

bool cow_oom_wait(uint64_t *until)
{
	uint64_t now = table_now_ns();
	if (*until && now >= *until)
		return false; /* the grace after the copy is over */
	pthread_rwlock_rdlock(&tab.lock);
	cow_header *t = atomic_load(&tab.t);
	bool pool = t && t->mode == COW_MODE_COW && pool_va;
	static _Atomic(cow_header *) said; /* the copy whose wait was logged */
	if (pool && atomic_exchange(&said, t) != t)
		tr_log("an allocation found no device memory while the CoW shadow pool of a checkpoint holds some: it "
		       "waits until the copy is off the GPU (phosfs --shadow-pool sets the pool's size)");
	if (pool) {
		atomic_fetch_add(&t->wait_ns, wait_all_off(t));
		atomic_fetch_add(&t->waits, 1);
	}
	pthread_rwlock_unlock(&tab.lock);
	if (pool) {
		/* Every t1 byte is off: the copy ends, and its pool goes. */
		dropped(OOM_GRACE_MS);
		if (!*until)
			*until = table_now_ns() + OOM_GRACE_MS * 1000000ull;
		return true;
	}
	uint64_t gone = atomic_load(&pool_gone_ns);
	if (!*until && gone && now - gone < OOM_GRACE_MS * 1000000ull)
		*until = gone + OOM_GRACE_MS * 1000000ull;
	if (!*until)
		return false;
	/* phosfs's job lets go of its own mapping of the pool a moment
	 * after the tracer: try again shortly. */
	struct timespec ts = { 0, OOM_RETRY_MS * 1000000L };
	nanosleep(&ts, NULL);
	return true;
}

void cow_freed(uint64_t va, uint64_t size)
{
	table_freed(&tab, va, size);
}

void cow_transfer(int delta)
{
	cow_header *t = atomic_load_explicit(&tab.t, memory_order_acquire);
	if (t)
		atomic_fetch_add_explicit(&t->pcie_pending, (uint32_t)delta, memory_order_relaxed);
}

/* Unmaps the table and the pool; lock held for writing. The table goes
 * first: the application's calls then see none (cow_active) and go on at
 * once, instead of waiting for the lock while the pool is unmapped. */
static void drop_locked(void)
{
	REAL(CUresult, cuMemUnmap, (CUdeviceptr, size_t));
	REAL(CUresult, cuMemAddressFree, (CUdeviceptr, size_t));
	REAL(CUresult, cuMemRelease, (CUmemGenericAllocationHandle));
	cow_header *t = table_take_locked(&tab);
	if (!t)
		return;
	if (pool_va) {
		real_cuMemUnmap(pool_va, t->pool_bytes);
		real_cuMemAddressFree(pool_va, t->pool_bytes);
	}
	if (pool_h)
		real_cuMemRelease(pool_h);
	if (pool_va)
		atomic_store(&pool_gone_ns, table_now_ns());
	pool_va = 0;
	pool_h = 0;
	free(shadow_on);
	shadow_on = NULL;
	table_unmap(&tab, t);
}

/* Whether a shadow copy is still queued (its host function not run). */
static bool shadowing(cow_header *t)
{
	_Atomic uint32_t *c = cow_chunks(t);
	for (uint64_t i = 0; i < t->nchunks; i++)
		if ((atomic_load(&c[i]) & COW_STATE_MASK) == COW_SHADOWING)
			return true;
	return false;
}

/* The only thread that unmaps a table: once the copy has ended and no
 * shadow copy is queued, checked again under the lock (a call that saw
 * the copy running may still queue one until it lets go of the lock). */
static void *reaper(void *arg)
{
	pthread_setname_np(pthread_self(), "phos-cow"); /* by itself: see control_main */
	cow_header *t = arg;
	for (;;) {
		uint32_t seen = atomic_load(&t->progress);
		if (!running(t) && !shadowing(t)) {
			pthread_rwlock_wrlock(&tab.lock);
			bool idle = !shadowing(t);
			if (idle && atomic_load(&tab.t) == t)
				drop_locked();
			pthread_rwlock_unlock(&tab.lock);
			if (idle)
				return NULL;
		}
		wait_progress(t, seen);
	}
}

/* Waits up to ms for the reaper to drop the last table. */
static bool dropped(int ms)
{
	for (int i = 0; i < ms && atomic_load(&tab.t); i++) {
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	return !atomic_load(&tab.t);
}

int cow_begin(const wire_cow *c, const int *fds, int nfds)
{
	REAL(CUresult, cuMemImportFromShareableHandle,
	     (CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType));
	REAL(CUresult, cuMemAddressReserve, (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long));
	REAL(CUresult, cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long));
	REAL(CUresult, cuMemSetAccess, (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t));
	if (nfds < 2 || (c->pool_bytes && nfds < 3))
		return -EPROTO;
	cow_header *t;
	int e = table_map(c, fds[0], &t);
	if (e)
		return e;
	void *p = t;
	if (t->mode > COW_MODE_TRACK ||
	    (t->mode == COW_MODE_TRACK && c->pool_bytes) ||
	    cow_table_bytes(t->nobjs, t->nchunks, t->nslots) > c->table_bytes || !t->chunk ||
	    t->pool_bytes != c->pool_bytes || (uint64_t)t->nslots * t->chunk > t->pool_bytes) {
		munmap(p, c->table_bytes);
		return -EPROTO;
	}
	/* An earlier copy's table goes with its reaper. */
	if (!dropped(5000)) {
		munmap(p, c->table_bytes);
		return -EBUSY;
	}
	pthread_rwlock_wrlock(&tab.lock);
	shadow_on = calloc(t->nchunks ? t->nchunks : 1, sizeof(*shadow_on));
	if (!shadow_on) {
		pthread_rwlock_unlock(&tab.lock);
		munmap(p, c->table_bytes);
		return -ENOMEM;
	}
	bool mapped = false;
	if (c->pool_bytes) {
		CUmemAccessDesc acc = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, (int)c->pool_device },
					.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
		if (real_cuMemImportFromShareableHandle(&pool_h, (void *)(intptr_t)fds[2],
							CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ||
		    real_cuMemAddressReserve(&pool_va, c->pool_bytes, 0, 0, 0) ||
		    !(mapped = real_cuMemMap(pool_va, c->pool_bytes, 0, pool_h, 0) == CUDA_SUCCESS) ||
		    real_cuMemSetAccess(pool_va, c->pool_bytes, &acc, 1))
			e = -EIO;
	}
	if (e) {
		/* Without the pool every write to a chunk not yet copied waits. */
		tr_log("cannot map the CoW shadow pool: writes wait for the copy instead");
		REAL(CUresult, cuMemAddressFree, (CUdeviceptr, size_t));
		REAL(CUresult, cuMemRelease, (CUmemGenericAllocationHandle));
		REAL(CUresult, cuMemUnmap, (CUdeviceptr, size_t));
		if (mapped)
			real_cuMemUnmap(pool_va, c->pool_bytes);
		if (pool_va)
			real_cuMemAddressFree(pool_va, c->pool_bytes);
		if (pool_h)
			real_cuMemRelease(pool_h);
		pool_va = 0;
		pool_h = 0;
		t->nslots = 0;
		e = 0;
	}
	table_hold(&tab, t, c->table_bytes, fds[1]);
	pthread_rwlock_unlock(&tab.lock);
	pthread_t th;
	if (pthread_create(&th, NULL, reaper, t) != 0) {
		/* Nobody would drop it: take no part in this copy. */
		pthread_rwlock_wrlock(&tab.lock);
		drop_locked();
		pthread_rwlock_unlock(&tab.lock);
		return -EAGAIN;
	}
	pthread_detach(th);
	return 0;
}

void cow_forget(void)
{
	/* A forked child: the parent's copy is not its own; the mappings of
	 * the table go with the child's address space. */
	table_drop_locked(&tab);
	free(shadow_on);
	shadow_on = NULL;
	pool_va = 0;
	pool_h = 0;
}

bool cow_tracking(void)
{
	pthread_rwlock_rdlock(&tab.lock);
	cow_header *t = atomic_load(&tab.t);
	bool track = t && t->mode == COW_MODE_TRACK && running(t);
	pthread_rwlock_unlock(&tab.lock);
	return track;
}

int cow_track_end(void)
{
	pthread_rwlock_rdlock(&tab.lock);
	cow_header *t = atomic_load(&tab.t);
	if (t && t->mode == COW_MODE_TRACK && atomic_exchange(&t->active, 0))
		table_bump(t);
	pthread_rwlock_unlock(&tab.lock);
	return dropped(5000) ? 0 : -EBUSY;
}

int cow_settle(void)
{
	pthread_rwlock_rdlock(&tab.lock);
	cow_header *t = atomic_load(&tab.t);
	/* (A job killed a moment ago: its copy has ended, though the
	 * reaper may not have seen it yet.) */
	bool busy = t && running(t) && !job_ended(t);
	pthread_rwlock_unlock(&tab.lock);
	if (busy)
		return -EBUSY;
	/* Ended: its reaper drops it once its shadow copies are done. */
	return dropped(5000) ? 0 : -EBUSY;
}
