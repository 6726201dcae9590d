/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The tracer's side of a lazy restore (common/cow.h, LAZY mode).
 *
 * A lazily restored process runs before its device memory is back. The
 * job sent a table of the objects still to come; each call that reads or
 * writes device memory first looks its ranges up there:
 *  - an object that is PRESENT (mapped again) or freed lets the call go;
 *  - any other marks it urgent, which the job fills next, and the call
 *    waits until the control thread has mapped it (lazy_arrived).
 * A call whose read or write set speculation cannot bound waits until
 * every object is back: on restore a wrong guess faults, so there is no
 * other safe choice.
 *
 * The control thread maps what arrives and drops the table when the job
 * says END, or when its connection ends (the job is gone: calls that wait
 * then go on, and touch memory that will never come back).
 */
#include <errno.h>
#include <sys/mman.h>

#include "tracer.h"

static tr_table tab = TR_TABLE_INIT;

/* Whether the fill can still bring anything: it runs, and its job lives.
 * Lock held for reading. */
static bool filling(cow_header *t)
{
	return atomic_load(&t->active) &&
	       !table_job_gone(&tab, t, "the restore's fill",
			       "device memory not yet back never will be, and calls that touch it fail");
}

bool lazy_active(void)
{
	return atomic_load_explicit(&tab.t, memory_order_acquire) != NULL;
}

int lazy_begin(const wire_cow *c, const int *fds, int nfds)
{
	if (nfds < 2 || c->pool_bytes)
		return -EPROTO;
	cow_header *t;
	int e = table_map(c, fds[0], &t);
	if (e)
		return e;
	if (t->mode != COW_MODE_LAZY || t->nchunks != t->nobjs || t->nslots ||
	    cow_table_bytes(t->nobjs, t->nchunks, 0) > c->table_bytes)
		e = -EPROTO;
	const cow_object *o = cow_objects(t);
	for (uint32_t i = 0; !e && i < t->nobjs; i++)
		if (o[i].first != i || (i && o[i].va < o[i - 1].va + o[i - 1].size))
			e = -EPROTO; /* not one state per object, or not sorted */
	pthread_rwlock_wrlock(&tab.lock);
	if (!e && atomic_load(&tab.t))
		e = -EBUSY;
	if (!e)
		table_hold(&tab, t, c->table_bytes, fds[1]);
	pthread_rwlock_unlock(&tab.lock);
	if (e)
		munmap(t, c->table_bytes);
	return e;
}

/* Waits until object i is back (or the fill is gone); lock held for
 * reading. Returns whether it waited. */
static bool need(cow_header *t, uint32_t i)
{
	_Atomic uint32_t *st = &cow_chunks(t)[i];
	const cow_object *o = &cow_objects(t)[i];
	bool waited = false;
	for (;;) {
		uint32_t seen = atomic_load(&t->progress);
		uint32_t v = atomic_load(st);
		if ((v & COW_STATE_MASK) == LAZY_PRESENT || atomic_load(&o->freed) || !filling(t))
			return waited;
		if (!(v & COW_URGENT)) {
			if (atomic_compare_exchange_strong(st, &v, v | COW_URGENT)) {
				atomic_fetch_add(&t->urgent, 1);
				table_bump(t);
			}
			continue;
		}
		waited = true;
		table_wait(t, seen);
	}
}

void lazy_need(uint64_t addr, uint64_t len)
{
	if (!lazy_active() || !addr || !len)
		return;
	pthread_rwlock_rdlock(&tab.lock);
	cow_header *t = atomic_load(&tab.t);
	if (t && atomic_load(&t->off) < t->nobjs) {
		const cow_object *objs = cow_objects(t);
		uint64_t from = table_now_ns(), end = addr + len;
		bool waited = false;
		for (uint32_t i = table_first_above(t, addr); i < t->nobjs && objs[i].va < end; i++)
			waited |= need(t, i);
		if (waited) {
			atomic_fetch_add(&t->waits, 1);
			atomic_fetch_add(&t->wait_ns, table_now_ns() - from);
		}
	}
	pthread_rwlock_unlock(&tab.lock);
}

void lazy_net(kernel_info *k)
{
	if (!lazy_active())
		return;
	pthread_rwlock_rdlock(&tab.lock);
	cow_header *t = atomic_load(&tab.t);
	uint64_t from = 0;
	while (t && atomic_load(&t->off) < t->nobjs && filling(t)) {
		uint32_t seen = atomic_load(&t->progress);
		if (atomic_load(&t->off) >= t->nobjs)
			break;
		if (!from)
			from = table_now_ns();
		table_wait(t, seen);
	}
	if (from) {
		atomic_fetch_add(&t->net_waits, 1);
		atomic_fetch_add(&t->net_wait_ns, table_now_ns() - from);
		if (k)
			atomic_fetch_add_explicit(&k->net_waits, 1, memory_order_relaxed);
	}
	pthread_rwlock_unlock(&tab.lock);
}

/* The object of t at va with size, or -1. */
static int64_t find(cow_header *t, uint64_t va, uint64_t size)
{
	const cow_object *objs = cow_objects(t);
	uint32_t lo = 0, hi = t->nobjs;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		if (objs[mid].va < va)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < t->nobjs && objs[lo].va == va && objs[lo].size == size ? (int64_t)lo : -1;
}

void lazy_arrived(const wire_object *recs, int n)
{
	pthread_rwlock_rdlock(&tab.lock);
	cow_header *t = atomic_load(&tab.t);
	for (int k = 0; t && k < n; k++) {
		int64_t i = find(t, recs[k].va, recs[k].size);
		if (i < 0)
			continue;
		_Atomic uint32_t *st = &cow_chunks(t)[i];
		uint32_t v = atomic_load(st);
		while ((v & COW_STATE_MASK) != LAZY_PRESENT &&
		       !atomic_compare_exchange_weak(st, &v, (v & ~(COW_STATE_MASK | COW_URGENT)) | LAZY_PRESENT))
			;
		if ((v & COW_STATE_MASK) != LAZY_PRESENT)
			atomic_fetch_add(&t->off, 1);
	}
	if (t)
		table_bump(t);
	pthread_rwlock_unlock(&tab.lock);
}

void lazy_freed(uint64_t va, uint64_t size)
{
	table_freed(&tab, va, size);
}

void lazy_end(void)
{
	cow_header *t = atomic_load(&tab.t);
	if (!t)
		return;
	/* Waiters see the fill end and let go of the lock. */
	atomic_store(&t->active, 0);
	table_bump(t);
	pthread_rwlock_wrlock(&tab.lock);
	table_drop_locked(&tab);
	pthread_rwlock_unlock(&tab.lock);
}

void lazy_forget(void)
{
	/* A forked child: the parent's restore is not its own. */
	table_drop_locked(&tab);
}
