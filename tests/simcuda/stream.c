/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Streams and events. Each stream is a FIFO of tasks run by its own worker
 * thread. The default stream (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD)
 * runs its work inline after draining every stream, which orders it against
 * all other work: what the legacy default stream promises, and stricter than
 * the per-thread one.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

typedef struct task {
	sc_task_fn fn;
	struct task *next;
	size_t size;
	max_align_t arg[]; /* copy of the caller's argument block */
} task;

typedef struct stream {
	/* Guarded by lock: head, tail, busy, stop. */
	pthread_mutex_t lock;
	pthread_cond_t wake; /* work arrived, or stop */
	pthread_cond_t idle; /* queue empty and nothing running */
	task *head, *tail;
	bool busy, stop;
	pthread_t worker;
	unsigned flags;
	int priority;
	unsigned long long id;
	CUcontext ctx;
	struct stream *next; /* in all_streams, guarded by streams_lock */
} stream;

static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;
static stream *all_streams;
static atomic_ullong next_stream_id = 1;

static bool is_default(CUstream s)
{
	return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

static void *worker_main(void *arg)
{
	/* Named by itself: another thread's tid is not the host /proc's in a
	 * pid namespace of its own. */
	pthread_setname_np(pthread_self(), "simcuda-stream");
	stream *s = arg;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		while (!s->head && !s->stop)
			pthread_cond_wait(&s->wake, &s->lock);
		if (!s->head)
			break; /* stop, and nothing left */
		task *t = s->head;
		s->head = t->next;
		if (!s->head)
			s->tail = NULL;
		s->busy = true;
		pthread_mutex_unlock(&s->lock);
		t->fn(t->arg);
		free(t);
		pthread_mutex_lock(&s->lock);
		s->busy = false;
		if (!s->head)
			pthread_cond_broadcast(&s->idle);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* Waits until s has nothing queued or running, until deadline
 * (CLOCK_REALTIME; NULL: for ever). Returns false if it did not. */
static bool stream_wait_idle(stream *s, const struct timespec *deadline)
{
	pthread_mutex_lock(&s->lock);
	int w = 0;
	while ((s->head || s->busy) && w != ETIMEDOUT)
		w = deadline ? pthread_cond_timedwait(&s->idle, &s->lock, deadline) : pthread_cond_wait(&s->idle, &s->lock);
	bool idle = !s->head && !s->busy;
	pthread_mutex_unlock(&s->lock);
	return idle;
}

void sc_streams_drain(void)
{
	sc_streams_drain_until(NULL);
}

bool sc_streams_drain_until(const struct timespec *deadline)
{
	bool idle = true;
	pthread_mutex_lock(&streams_lock);
	for (stream *s = all_streams; s && idle; s = s->next)
		idle = stream_wait_idle(s, deadline);
	pthread_mutex_unlock(&streams_lock);
	return idle;
}

static bool stream_known(stream *s)
{
	pthread_mutex_lock(&streams_lock);
	stream *i = all_streams;
	while (i && i != s)
		i = i->next;
	pthread_mutex_unlock(&streams_lock);
	return i != NULL;
}

CUresult sc_stream_submit(CUstream hs, sc_task_fn fn, void *arg, size_t arg_size)
{
	if (is_default(hs)) {
		sc_streams_drain();
		fn(arg);
		return CUDA_SUCCESS;
	}
	stream *s = (stream *)hs;
	task *t = malloc(sizeof(*t) + arg_size);
	if (!t)
		return CUDA_ERROR_OUT_OF_MEMORY;
	t->fn = fn;
	t->next = NULL;
	t->size = arg_size;
	memcpy(t->arg, arg, arg_size);
	pthread_mutex_lock(&s->lock);
	if (s->tail)
		s->tail->next = t;
	else
		s->head = t;
	s->tail = t;
	pthread_cond_signal(&s->wake);
	pthread_mutex_unlock(&s->lock);
	return CUDA_SUCCESS;
}

static CUresult create(CUstream *ps, unsigned flags, int priority)
{
	if (!ps || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_ctx_require();
	if (r)
		return r;
	stream *s = calloc(1, sizeof(*s));
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->wake, NULL);
	pthread_cond_init(&s->idle, NULL);
	s->flags = flags;
	s->priority = priority;
	s->id = atomic_fetch_add(&next_stream_id, 1);
	s->ctx = sc_ctx_current();
	if (pthread_create(&s->worker, NULL, worker_main, s) != 0) {
		free(s);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&streams_lock);
	s->next = all_streams;
	all_streams = s;
	pthread_mutex_unlock(&streams_lock);
	*ps = (CUstream)s;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuStreamCreate(CUstream *ps, unsigned int flags)
{
	SC_API();
	return create(ps, flags, 0);
}

SC_EXPORT CUresult cuStreamCreateWithPriority(CUstream *ps, unsigned int flags, int priority)
{
	SC_API();
	return create(ps, flags, priority);
}

SC_EXPORT CUresult cuStreamDestroy(CUstream hs)
{
	SC_API();
	stream *s = (stream *)hs;
	if (is_default(hs))
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&streams_lock);
	stream **p = &all_streams;
	while (*p && *p != s)
		p = &(*p)->next;
	bool found = *p != NULL;
	if (found)
		*p = s->next;
	pthread_mutex_unlock(&streams_lock);
	if (!found)
		return CUDA_ERROR_INVALID_HANDLE;
	/* Work already queued still runs, as on a GPU. */
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	pthread_cond_signal(&s->wake);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->worker, NULL);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->wake);
	pthread_cond_destroy(&s->idle);
	free(s);
	return CUDA_SUCCESS;
}

static CUresult stream_sync(CUstream hs)
{
	if (is_default(hs)) {
		sc_streams_drain();
		return CUDA_SUCCESS;
	}
	if (!stream_known((stream *)hs))
		return CUDA_ERROR_INVALID_HANDLE;
	stream_wait_idle((stream *)hs, NULL);
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuStreamSynchronize(CUstream hs)
{
	SC_API();
	return stream_sync(hs);
}

SC_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hs)
{
	SC_API();
	return stream_sync(hs);
}

static CUresult stream_query(CUstream hs)
{
	if (is_default(hs)) {
		CUresult r = CUDA_SUCCESS;
		pthread_mutex_lock(&streams_lock);
		for (stream *s = all_streams; s && !r; s = s->next) {
			pthread_mutex_lock(&s->lock);
			if (s->head || s->busy)
				r = CUDA_ERROR_NOT_READY;
			pthread_mutex_unlock(&s->lock);
		}
		pthread_mutex_unlock(&streams_lock);
		return r;
	}
	stream *s = (stream *)hs;
	pthread_mutex_lock(&s->lock);
	bool done = !s->head && !s->busy;
	pthread_mutex_unlock(&s->lock);
	return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SC_EXPORT CUresult cuStreamQuery(CUstream hs)
{
	SC_API();
	return stream_query(hs);
}

SC_EXPORT CUresult cuStreamQuery_ptsz(CUstream hs)
{
	SC_API();
	return stream_query(hs);
}

SC_EXPORT CUresult cuStreamGetFlags(CUstream hs, unsigned int *flags)
{
	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	*flags = is_default(hs) ? 0 : ((stream *)hs)->flags;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuStreamGetPriority(CUstream hs, int *priority)
{
	if (!priority)
		return CUDA_ERROR_INVALID_VALUE;
	*priority = is_default(hs) ? 0 : ((stream *)hs)->priority;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuStreamGetId(CUstream hs, unsigned long long *id)
{
	if (!id)
		return CUDA_ERROR_INVALID_VALUE;
	*id = is_default(hs) ? 0 : ((stream *)hs)->id;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuStreamGetCtx(CUstream hs, CUcontext *ctx)
{
	if (!ctx)
		return CUDA_ERROR_INVALID_VALUE;
	*ctx = is_default(hs) ? sc_ctx_current() : ((stream *)hs)->ctx;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuDeviceGetStreamPriorityRange(int *least, int *greatest)
{
	if (least)
		*least = 0;
	if (greatest)
		*greatest = -5;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
	return cuDeviceGetStreamPriorityRange(least, greatest);
}

/* ---- host functions ----------------------------------------------------- */

typedef struct host_fn_args {
	CUhostFn fn;
	void *data;
} host_fn_args;

static void host_fn_task(void *arg)
{
	host_fn_args *a = arg;
	a->fn(a->data);
}

static CUresult launch_host_fn(CUstream s, CUhostFn fn, void *data)
{
	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	host_fn_args a = { fn, data };
	return sc_stream_submit(s, host_fn_task, &a, sizeof(a));
}

SC_EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data)
{
	SC_API();
	return launch_host_fn(s, fn, data);
}

SC_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *data)
{
	SC_API();
	return launch_host_fn(s, fn, data);
}

typedef struct callback_args {
	CUstreamCallback fn;
	CUstream stream;
	void *data;
} callback_args;

static void callback_task(void *arg)
{
	callback_args *a = arg;
	a->fn(a->stream, CUDA_SUCCESS, a->data);
}

SC_EXPORT CUresult cuStreamAddCallback(CUstream s, CUstreamCallback fn, void *data, unsigned int flags)
{
	SC_API();
	if (!fn || flags)
		return CUDA_ERROR_INVALID_VALUE;
	callback_args a = { fn, s, data };
	return sc_stream_submit(s, callback_task, &a, sizeof(a));
}

/* ---- events ------------------------------------------------------------- */

/* Records asked for, and completed: the event's own, or for an
 * interprocess event (CU_EVENT_INTERPROCESS) a page of a memfd that the
 * processes that opened it (cuIpcOpenEventHandle) map too. */
typedef struct ev_counts {
	_Atomic uint64_t recorded; /* generation of the last record */
	_Atomic uint64_t done;     /* generation that has completed */
} ev_counts;

typedef struct event {
	unsigned flags;
	ev_counts own, *c;
	int fd; /* an interprocess event's memfd, or -1 */
	struct timespec when; /* guarded by ev_lock */
} event;

static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_changed = PTHREAD_COND_INITIALIZER;

/* A new event whose counts are in the memfd fd (-1: its own). */
static CUresult event_new(unsigned flags, int fd, CUevent *pe)
{
	event *e = calloc(1, sizeof(*e));
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->flags = flags;
	e->c = &e->own;
	e->fd = fd;
	if (fd >= 0) {
		void *p = mmap(NULL, sizeof(ev_counts), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED) {
			free(e);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		e->c = p;
	}
	*pe = (CUevent)e;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuEventCreate(CUevent *pe, unsigned int flags)
{
	SC_API();
	if (!pe)
		return CUDA_ERROR_INVALID_VALUE;
	/* As the driver: an interprocess event has no timing. */
	if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_ctx_require();
	if (r)
		return r;
	int fd = -1;
	if (flags & CU_EVENT_INTERPROCESS) {
		fd = memfd_create("simcuda-event", MFD_CLOEXEC);
		if (fd < 0 || ftruncate(fd, sizeof(ev_counts))) {
			if (fd >= 0)
				close(fd);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	r = event_new(flags, fd, pe);
	if (r && fd >= 0)
		close(fd);
	return r;
}

CUresult sc_event_ipc_fd(CUevent he, int *fd)
{
	event *e = (event *)he;
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!(e->flags & CU_EVENT_INTERPROCESS) || e->fd < 0)
		return CUDA_ERROR_INVALID_VALUE;
	*fd = e->fd;
	return CUDA_SUCCESS;
}

CUresult sc_event_ipc_open(int fd, CUevent *pe)
{
	struct stat st;
	if (fstat(fd, &st) || (size_t)st.st_size < sizeof(ev_counts))
		return CUDA_ERROR_INVALID_VALUE;
	return event_new(CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING, fd, pe);
}

SC_EXPORT CUresult cuEventDestroy(CUevent he)
{
	if (!he)
		return CUDA_ERROR_INVALID_HANDLE;
	/* Tasks may still reference it: wait for them, as destroy is lazy on
	 * a GPU and the memory must outlive them here. */
	sc_streams_drain();
	event *e = (event *)he;
	if (e->fd >= 0) {
		munmap(e->c, sizeof(ev_counts));
		close(e->fd);
	}
	free(e);
	return CUDA_SUCCESS;
}

typedef struct record_args {
	event *e;
	uint64_t gen;
} record_args;

static void record_task(void *arg)
{
	record_args *a = arg;
	pthread_mutex_lock(&ev_lock);
	uint64_t d = atomic_load(&a->e->c->done);
	while (a->gen > d && !atomic_compare_exchange_weak(&a->e->c->done, &d, a->gen))
		;
	if (a->gen > d)
		clock_gettime(CLOCK_MONOTONIC, &a->e->when);
	pthread_cond_broadcast(&ev_changed);
	pthread_mutex_unlock(&ev_lock);
}

static CUresult event_record(CUevent he, CUstream s)
{
	event *e = (event *)he;
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	record_args a = { e, atomic_fetch_add(&e->c->recorded, 1) + 1 };
	return sc_stream_submit(s, record_task, &a, sizeof(a));
}

SC_EXPORT CUresult cuEventRecord(CUevent he, CUstream s)
{
	SC_API();
	return event_record(he, s);
}

SC_EXPORT CUresult cuEventRecord_ptsz(CUevent he, CUstream s)
{
	SC_API();
	return event_record(he, s);
}

SC_EXPORT CUresult cuEventRecordWithFlags(CUevent he, CUstream s, unsigned int flags)
{
	SC_API();
	(void)flags;
	return event_record(he, s);
}

/* Waits until generation gen of e has completed: an interprocess event's
 * may complete in another process, which signals nothing here. */
static void wait_gen(event *e, uint64_t gen)
{
	if (e->fd >= 0) {
		while (atomic_load(&e->c->done) < gen)
			usleep(200);
		return;
	}
	pthread_mutex_lock(&ev_lock);
	while (atomic_load(&e->c->done) < gen)
		pthread_cond_wait(&ev_changed, &ev_lock);
	pthread_mutex_unlock(&ev_lock);
}

SC_EXPORT CUresult cuEventSynchronize(CUevent he)
{
	SC_API();
	event *e = (event *)he;
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	wait_gen(e, atomic_load(&e->c->recorded));
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuEventQuery(CUevent he)
{
	event *e = (event *)he;
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	bool done = atomic_load(&e->c->done) >= atomic_load(&e->c->recorded);
	return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SC_EXPORT CUresult cuEventElapsedTime(float *ms, CUevent hstart, CUevent hend)
{
	event *a = (event *)hstart, *b = (event *)hend;
	if (!ms || !a || !b)
		return CUDA_ERROR_INVALID_HANDLE;
	if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&ev_lock);
	CUresult r = CUDA_SUCCESS;
	uint64_t ad = atomic_load(&a->c->done), bd = atomic_load(&b->c->done);
	if (ad == 0 || bd == 0)
		r = CUDA_ERROR_INVALID_HANDLE;
	else if (ad < atomic_load(&a->c->recorded) || bd < atomic_load(&b->c->recorded))
		r = CUDA_ERROR_NOT_READY;
	else
		*ms = (float)((double)(b->when.tv_sec - a->when.tv_sec) * 1e3 +
			      (double)(b->when.tv_nsec - a->when.tv_nsec) / 1e6);
	pthread_mutex_unlock(&ev_lock);
	return r;
}

SC_LEGACY(sc_cuEventElapsedTime_v1, "cuEventElapsedTime", (float *ms, CUevent hstart, CUevent hend))
{
	return cuEventElapsedTime(ms, hstart, hend);
}

typedef struct wait_args {
	event *e;
	uint64_t gen;
} wait_args;

static void wait_task(void *arg)
{
	wait_args *a = arg;
	wait_gen(a->e, a->gen);
}

static CUresult stream_wait_event(CUstream s, CUevent he, unsigned flags)
{
	event *e = (event *)he;
	if (!e || flags)
		return CUDA_ERROR_INVALID_VALUE;
	wait_args a = { e, atomic_load(&e->c->recorded) };
	if (is_default(s)) {
		wait_task(&a);
		return CUDA_SUCCESS;
	}
	return sc_stream_submit(s, wait_task, &a, sizeof(a));
}

SC_EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent he, unsigned int flags)
{
	SC_API();
	return stream_wait_event(s, he, flags);
}

SC_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent he, unsigned int flags)
{
	SC_API();
	return stream_wait_event(s, he, flags);
}
