/* SPDX-License-Identifier: GPL-2.0-only */
/* The API gate that cuCheckpointProcessLock closes. While it is closed,
 * every call that touches device state blocks at entry, as the driver's own
 * lock makes them do. */
#include <errno.h>
#include <time.h>

#include "internal.h"

/* Guarded by lock: closed, in_flight. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static bool closed;
static unsigned in_flight;

/* Calls made by simcuda itself while serving a checkpoint request (stream
 * drain) must not wait on the gate they are closing. */
static _Thread_local int nested;

void sc_gate_enter(void)
{
	if (nested++)
		return;
	pthread_mutex_lock(&lock);
	while (closed)
		pthread_cond_wait(&changed, &lock);
	in_flight++;
	pthread_mutex_unlock(&lock);
}

void sc_gate_leave(int *token)
{
	(void)token;
	if (--nested)
		return;
	pthread_mutex_lock(&lock);
	if (--in_flight == 0)
		pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
}

static void deadline_after(struct timespec *ts, unsigned ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

bool sc_gate_close(unsigned timeout_ms)
{
	struct timespec deadline;

	if (timeout_ms)
		deadline_after(&deadline, timeout_ms);
	pthread_mutex_lock(&lock);
	closed = true;
	while (in_flight) {
		int e = timeout_ms ? pthread_cond_timedwait(&changed, &lock, &deadline)
				   : pthread_cond_wait(&changed, &lock);
		if (e == ETIMEDOUT && in_flight) {
			closed = false;
			pthread_cond_broadcast(&changed);
			pthread_mutex_unlock(&lock);
			return false;
		}
	}
	pthread_mutex_unlock(&lock);
	/* Outstanding work finishes before the lock is reported taken, within
	 * the same deadline, as the driver's lock does. */
	if (!sc_streams_drain_until(timeout_ms ? &deadline : NULL)) {
		sc_gate_open();
		return false;
	}
	return true;
}

void sc_gate_open(void)
{
	pthread_mutex_lock(&lock);
	closed = false;
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
}
