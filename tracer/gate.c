/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The gate. Each thread has a slot whose `inside` flag it sets on entry and
 * clears on exit; entry then checks the global `closed` flag. Quiesce sets
 * `closed` and waits for every slot to be outside. Either quiesce sees a
 * thread inside, or the thread sees the gate closed, so the fast path takes
 * no lock.
 *
 * That needs a full fence between a thread's store to `inside` and its
 * load of `closed`. The fast path pays only a compiler barrier: quiesce
 * makes every thread execute a full fence with membarrier(2) after setting
 * `closed` and before reading the slots. Where membarrier is refused, the
 * fast path fences itself.
 *
 * Threads that find the gate closed take a ticket and pass, when it opens,
 * in ticket order.
 */
#include <errno.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tracer.h"

typedef struct slot {
	atomic_int inside;
	_Atomic(const char *) what; /* the call it is inside (owner writes) */
	pid_t tid;
	int depth;          /* nested entries by the same thread (owner only) */
	atomic_ulong passed; /* calls let through (owner writes, anyone reads) */
	struct slot *next;
} slot;

static atomic_bool closed;
/* 1: quiesce fences every thread with membarrier; 0: entries fence.
 * Decided once, before any thread's first entry. */
static atomic_int asymmetric;
static pthread_once_t asymmetric_once = PTHREAD_ONCE_INIT;

static void decide_asymmetric(void);

/* Guarded by lock: slots, tickets. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t opened = PTHREAD_COND_INITIALIZER;
static slot *slots;
static uint64_t next_ticket, serving;

/* libphos.so is preloaded, so its TLS is static: no __tls_get_addr. */
static _Thread_local slot *self __attribute__((tls_model("initial-exec")));

static int membarrier(int cmd)
{
	return (int)syscall(SYS_membarrier, cmd, 0, 0);
}

static void decide_asymmetric(void)
{
	atomic_store(&asymmetric, membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0);
}

static slot *my_slot(void)
{
	if (self)
		return self;
	pthread_once(&asymmetric_once, decide_asymmetric);
	/* Never freed: a thread's slot may be looked at by quiesce after the
	 * thread exits, and slots are few. */
	slot *s = calloc(1, sizeof(*s));
	if (!s)
		abort();
	s->tid = gettid();
	pthread_mutex_lock(&lock);
	s->next = slots;
	slots = s;
	pthread_mutex_unlock(&lock);
	self = s;
	return s;
}

static void wait_open(void)
{
	pthread_mutex_lock(&lock);
	uint64_t ticket = next_ticket++;
	while (atomic_load(&closed) || serving != ticket)
		pthread_cond_wait(&opened, &lock);
	serving++;
	pthread_cond_broadcast(&opened);
	pthread_mutex_unlock(&lock);
}

void gate_enter(const char *what)
{
	slot *s = my_slot();
	if (s->depth++)
		return;
	atomic_store_explicit(&s->what, what, memory_order_relaxed);
	for (;;) {
		atomic_store_explicit(&s->inside, 1, memory_order_relaxed);
		if (atomic_load_explicit(&asymmetric, memory_order_relaxed))
			atomic_signal_fence(memory_order_seq_cst);
		else
			atomic_thread_fence(memory_order_seq_cst);
		if (!atomic_load_explicit(&closed, memory_order_relaxed))
			break;
		atomic_store(&s->inside, 0);
		wait_open();
	}
	atomic_store_explicit(&s->passed, atomic_load_explicit(&s->passed, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

void gate_leave(void)
{
	slot *s = self;
	if (--s->depth == 0)
		atomic_store_explicit(&s->inside, 0, memory_order_release);
}

/* "its main thread", or "its thread NAME (tid N)", for people. */
static void name_thread(pid_t tid, char *out, size_t len)
{
	if (tid == getpid()) {
		snprintf(out, len, "its main thread");
		return;
	}
	char path[64], comm[32] = "";
	snprintf(path, sizeof(path), "/proc/self/task/%d/comm", (int)tid);
	FILE *f = fopen(path, "re");
	if (f && fgets(comm, sizeof(comm), f))
		comm[strcspn(comm, "\n")] = 0;
	if (f)
		fclose(f);
	snprintf(out, len, "its thread %s (tid %d)", *comm ? comm : "?", (int)tid);
}

/* Waits until no thread is inside, until deadline (CLOCK_MONOTONIC ns);
 * else names the first one still inside in why. */
static int wait_outside(uint64_t deadline, char *why, size_t len)
{
	pthread_mutex_lock(&lock);
	slot *list = slots;
	pthread_mutex_unlock(&lock);
	for (slot *s = list; s; s = s->next)
		for (unsigned spins = 0; atomic_load(&s->inside); spins++) {
			if (table_now_ns() >= deadline) {
				const char *what = atomic_load_explicit(&s->what, memory_order_relaxed);
				char who[64];
				name_thread(s->tid, who, sizeof(who));
				snprintf(why, len, "%s is still inside %s", who, what ? what : "a CUDA call");
				return -ETIMEDOUT;
			}
			if (spins < 1000)
				sched_yield();
			else
				nanosleep(&(struct timespec){ 0, 50000 }, NULL);
		}
	return 0;
}

int gate_quiesce(int timeout_ms, char *why, size_t len)
{
	uint64_t deadline = table_now_ns() + (uint64_t)timeout_ms * 1000000u;
	atomic_store(&closed, true);
	/* Every thread's store to `inside` before this is now visible, and
	 * every later load of `closed` sees true. */
	if (atomic_load(&asymmetric) && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0)
		tr_log("membarrier failed: %m");
	int e = wait_outside(deadline, why, len);
	if (!e)
		e = ctx_synchronize_until(deadline, why, len);
	return e;
}

void gate_resume(void)
{
	pthread_mutex_lock(&lock);
	atomic_store(&closed, false);
	pthread_cond_broadcast(&opened);
	pthread_mutex_unlock(&lock);
}

bool gate_closed(void)
{
	return atomic_load(&closed);
}

uint64_t gate_passed(void)
{
	uint64_t n = 0;
	pthread_mutex_lock(&lock);
	for (slot *s = slots; s; s = s->next)
		n += atomic_load(&s->passed);
	pthread_mutex_unlock(&lock);
	return n;
}
