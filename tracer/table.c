/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * What the CoW, TRACK and LAZY tables a job hands this process share
 * (common/cow.h): where one is held and what guards it, its clock,
 * waking and waiting on its progress, noticing that its job is gone,
 * and the objects a free touches. cow.c and lazy.c each hold one.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "tracer.h"

#define WAIT_SLICE_NS 50000000L /* look at the job again this often while waiting */

uint64_t table_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void table_bump(cow_header *t)
{
	atomic_fetch_add(&t->progress, 1);
	if (atomic_load(&t->waiters))
		cow_futex_wake(&t->progress);
}

void table_wait(cow_header *t, uint32_t seen)
{
	atomic_fetch_add(&t->waiters, 1);
	cow_futex_wait(&t->progress, seen, WAIT_SLICE_NS);
	atomic_fetch_sub(&t->waiters, 1);
}

int table_map(const wire_cow *c, int fd, cow_header **out)
{
	if (c->table_bytes < sizeof(cow_header))
		return -EPROTO;
	void *p = mmap(NULL, c->table_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	cow_header *t = p;
	if (t->magic != COW_MAGIC || t->version != COW_VERSION) {
		munmap(p, c->table_bytes);
		return -EPROTO;
	}
	*out = t;
	return 0;
}

void table_hold(tr_table *tb, cow_header *t, uint64_t bytes, int job_fd)
{
	tb->bytes = bytes;
	tb->job_fd = fcntl(job_fd, F_DUPFD_CLOEXEC, 3);
	atomic_store_explicit(&tb->t, t, memory_order_release);
}

bool table_job_gone(tr_table *tb, cow_header *t, const char *what, const char *so)
{
	struct pollfd pf = { tb->job_fd, POLLIN, 0 };
	if (tb->job_fd < 0 || poll(&pf, 1, 0) != 1 || !atomic_exchange(&t->active, 0))
		return false;
	tr_log("%s (phosfs job %d) is gone: %s", what, (int)t->job, so);
	table_bump(t);
	return true;
}

uint32_t table_first_above(const cow_header *t, uint64_t addr)
{
	const cow_object *objs = cow_objects((cow_header *)t);
	uint32_t lo = 0, hi = t->nobjs;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		if (objs[mid].va + objs[mid].size <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

void table_freed(tr_table *tb, uint64_t va, uint64_t size)
{
	if (!atomic_load_explicit(&tb->t, memory_order_acquire))
		return;
	pthread_rwlock_rdlock(&tb->lock);
	cow_header *t = atomic_load(&tb->t);
	for (uint32_t i = 0; t && i < t->nobjs; i++) {
		cow_object *o = &cow_objects(t)[i];
		if (o->va < va + size && va < o->va + o->size)
			atomic_store(&o->freed, 1);
	}
	if (t)
		table_bump(t);
	pthread_rwlock_unlock(&tb->lock);
}

cow_header *table_take_locked(tr_table *tb)
{
	return atomic_exchange(&tb->t, NULL);
}

void table_unmap(tr_table *tb, cow_header *t)
{
	if (t)
		munmap(t, tb->bytes);
	if (tb->job_fd >= 0)
		close(tb->job_fd);
	tb->job_fd = -1;
}

void table_drop_locked(tr_table *tb)
{
	table_unmap(tb, table_take_locked(tb));
}
