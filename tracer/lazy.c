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
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../common/cow.h"
#include "tracer.h"

#define WAIT_SLICE_NS 50000000L /* look at the job again this often while waiting */

/* `table` is read without the lock on the fast path; the mapping it
 * points to lives until lazy_end, which takes lock for writing, so a
 * reader holding it for reading may use the table. */
static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static _Atomic(cow_header *) table;
static uint64_t table_bytes; /* guarded by lock */
static int job_fd = -1;      /* guarded by lock: a pidfd of the filling job */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void bump(cow_header *t)
{
	atomic_fetch_add(&t->progress, 1);
	cow_futex_wake(&t->progress);
}

/* Whether the fill can still bring anything: it runs, and its job lives.
 * Lock held for reading. */
static bool filling(cow_header *t)
{
	if (!atomic_load(&t->active))
		return false;
	struct pollfd pf = { job_fd, POLLIN, 0 };
	if (job_fd >= 0 && poll(&pf, 1, 0) == 1 && atomic_exchange(&t->active, 0)) {
		tr_log("the restore's fill (phosfs job %d) is gone: device memory not yet back never will be, "
		       "and calls that touch it fail",
		       (int)t->job);
		bump(t);
		return false;
	}
	return true;
}

bool lazy_active(void)
{
	return atomic_load_explicit(&table, memory_order_acquire) != NULL;
}

int lazy_begin(const wire_cow *c, const int *fds, int nfds)
{
	if (nfds < 2 || c->pool_bytes || c->table_bytes < sizeof(cow_header))
		return -EPROTO;
	void *p = mmap(NULL, c->table_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	if (p == MAP_FAILED)
		return -errno;
	cow_header *t = p;
	if (t->magic != COW_MAGIC || t->version != COW_VERSION || t->mode != COW_MODE_LAZY ||
	    t->nchunks != t->nobjs || t->nslots ||
	    cow_table_bytes(t->nobjs, t->nchunks, 0) > c->table_bytes) {
		munmap(p, c->table_bytes);
		return -EPROTO;
	}
	const cow_object *o = cow_objects(t);
	for (uint32_t i = 0; i < t->nobjs; i++) {
		if (o[i].first != i || (i && o[i].va < o[i - 1].va + o[i - 1].size)) {
			munmap(p, c->table_bytes);
			return -EPROTO; /* not one state per object, or not sorted */
		}
	}
	pthread_rwlock_wrlock(&lock);
	if (atomic_load(&table)) {
		pthread_rwlock_unlock(&lock);
		munmap(p, c->table_bytes);
		return -EBUSY;
	}
	table_bytes = c->table_bytes;
	job_fd = fcntl(fds[1], F_DUPFD_CLOEXEC, 3);
	atomic_store_explicit(&table, t, memory_order_release);
	pthread_rwlock_unlock(&lock);
	return 0;
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
				bump(t);
			}
			continue;
		}
		waited = true;
		atomic_fetch_add(&t->waiters, 1);
		cow_futex_wait(&t->progress, seen, WAIT_SLICE_NS);
		atomic_fetch_sub(&t->waiters, 1);
	}
}

void lazy_need(uint64_t addr, uint64_t len)
{
	if (!lazy_active() || !addr || !len)
		return;
	pthread_rwlock_rdlock(&lock);
	cow_header *t = atomic_load(&table);
	if (t && atomic_load(&t->off) < t->nobjs) {
		const cow_object *objs = cow_objects(t);
		/* The first object that ends above addr. */
		uint32_t lo = 0, hi = t->nobjs;
		while (lo < hi) {
			uint32_t mid = (lo + hi) / 2;
			if (objs[mid].va + objs[mid].size <= addr)
				lo = mid + 1;
			else
				hi = mid;
		}
		uint64_t from = now_ns(), end = addr + len;
		bool waited = false;
		for (uint32_t i = lo; i < t->nobjs && objs[i].va < end; i++)
			waited |= need(t, i);
		if (waited) {
			atomic_fetch_add(&t->waits, 1);
			atomic_fetch_add(&t->wait_ns, now_ns() - from);
		}
	}
	pthread_rwlock_unlock(&lock);
}

void lazy_net(kernel_info *k)
{
	if (!lazy_active())
		return;
	pthread_rwlock_rdlock(&lock);
	cow_header *t = atomic_load(&table);
	uint64_t from = 0;
	while (t && atomic_load(&t->off) < t->nobjs && filling(t)) {
		uint32_t seen = atomic_load(&t->progress);
		if (atomic_load(&t->off) >= t->nobjs)
			break;
		if (!from)
			from = now_ns();
		atomic_fetch_add(&t->waiters, 1);
		cow_futex_wait(&t->progress, seen, WAIT_SLICE_NS);
		atomic_fetch_sub(&t->waiters, 1);
	}
	if (from) {
		atomic_fetch_add(&t->net_waits, 1);
		atomic_fetch_add(&t->net_wait_ns, now_ns() - from);
		if (k)
			atomic_fetch_add_explicit(&k->net_waits, 1, memory_order_relaxed);
	}
	pthread_rwlock_unlock(&lock);
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
	pthread_rwlock_rdlock(&lock);
	cow_header *t = atomic_load(&table);
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
		bump(t);
	pthread_rwlock_unlock(&lock);
}

void lazy_freed(uint64_t va, uint64_t size)
{
	if (!lazy_active())
		return;
	pthread_rwlock_rdlock(&lock);
	cow_header *t = atomic_load(&table);
	for (uint32_t i = 0; t && i < t->nobjs; i++) {
		cow_object *o = &cow_objects(t)[i];
		if (o->va < va + size && va < o->va + o->size)
			atomic_store(&o->freed, 1);
	}
	if (t)
		bump(t);
	pthread_rwlock_unlock(&lock);
}

void lazy_end(void)
{
	cow_header *t = atomic_load(&table);
	if (!t)
		return;
	/* Waiters see the fill end and let go of the lock. */
	atomic_store(&t->active, 0);
	bump(t);
	pthread_rwlock_wrlock(&lock);
	t = atomic_exchange(&table, NULL);
	if (t)
		munmap(t, table_bytes);
	if (job_fd >= 0)
		close(job_fd);
	job_fd = -1;
	pthread_rwlock_unlock(&lock);
}

void lazy_forget(void)
{
	/* A forked child: the parent's restore is not its own. */
	cow_header *t = atomic_exchange(&table, NULL);
	if (t)
		munmap(t, table_bytes);
	if (job_fd >= 0)
		close(job_fd);
	job_fd = -1;
}
