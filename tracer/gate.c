/*
 * The gate. Each thread has a slot whose `inside` flag it sets on entry and
 * clears on exit; entry then checks the global `closed` flag. Quiesce sets
 * `closed` and waits for every slot to be outside. With sequentially
 * consistent atomics, either quiesce sees a thread inside, or the thread
 * sees the gate closed: the fast path takes no lock.
 *
 * Threads that find the gate closed take a ticket and pass, when it opens,
 * in ticket order.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "tracer.h"

typedef struct slot {
	atomic_int inside;
	int depth; /* nested entries by the same thread (owner only) */
	struct slot *next;
} slot;

static atomic_bool closed;
static atomic_uint_fast64_t passed;

/* Guarded by lock: slots, tickets. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t opened = PTHREAD_COND_INITIALIZER;
static slot *slots;
static uint64_t next_ticket, serving;

static _Thread_local slot *self;

static slot *my_slot(void)
{
	if (self)
		return self;
	/* Never freed: a thread's slot may be looked at by quiesce after the
	 * thread exits, and slots are few. */
	slot *s = calloc(1, sizeof(*s));
	if (!s)
		abort();
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

void gate_enter(void)
{
	slot *s = my_slot();
	if (s->depth++)
		return;
	for (;;) {
		atomic_store(&s->inside, 1);
		if (!atomic_load(&closed))
			break;
		atomic_store(&s->inside, 0);
		wait_open();
	}
	atomic_fetch_add_explicit(&passed, 1, memory_order_relaxed);
}

void gate_leave(void)
{
	slot *s = self;
	if (--s->depth == 0)
		atomic_store_explicit(&s->inside, 0, memory_order_release);
}

CUresult gate_quiesce(void)
{
	atomic_store(&closed, true);
	pthread_mutex_lock(&lock);
	slot *list = slots;
	pthread_mutex_unlock(&lock);
	for (slot *s = list; s; s = s->next)
		while (atomic_load(&s->inside))
			sched_yield();
	return ctx_synchronize_all();
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
	return atomic_load(&passed);
}
