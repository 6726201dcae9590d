/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The control thread: the tracer's side of the channel to phosfs.
 *
 * It connects at the first cuInit (and keeps trying, once a second, while
 * phosfs is not there), says HELLO, then serves phosfs's requests:
 *
 *   LIST   the buffer table;
 *   KERNELS the speculation counters of each kernel;
 *   PARK   quiesce, hand every device memory object over as an fd, release
 *          it, lower the contexts' stack limits (their local memory is
 *          device memory the driver would save), close the socket, and
 *          wait for WIRE_WAKE_SIGNAL; then connect again, take the fds
 *          back, map them, set the limits back, resume.
 *
 * After a lazy restore the connection is the restore job's until it says
 * END: it sends each object as it fills it (OBJECTS), and this thread
 * maps it while the application runs (lazy.c).
 *
 * While parked nothing phosfs holds the other end of is open here, so CRIU
 * can dump the process; a restored process waits for the same signal.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/state.h"
#include "tracer.h"

#define BUF_BATCH (WIRE_MAX_PAYLOAD / sizeof(wire_buffer))

static pthread_once_t once = PTHREAD_ONCE_INIT;

/* The connection to phosfs, or -1; a forked child closes its copy. */
static _Atomic int live_sock = -1;

static int send_error(int sock, const char *msg)
{
	return wire_send(sock, WIRE_ERROR, msg, (uint32_t)strlen(msg) + 1, 0, NULL, 0);
}

/* Says who we are, with the state table. */
static int hello(int sock, uint32_t flags)
{
	int fd = state_open();
	if (fd < 0)
		tr_log("no state table (%s): phosfs gets none", strerror(-fd));
	wire_hello h = { .pid = getpid(), .control_tid = gettid(), .flags = flags };
	if (alloc_stop_only(h.stop_only_reason, sizeof(h.stop_only_reason)))
		h.flags |= WIRE_HELLO_STOP_ONLY;
	return wire_send(sock, WIRE_HELLO, &h, sizeof(h), 1, fd >= 0 ? &fd : NULL, fd >= 0);
}

static int serve_list(int sock)
{
	wire_buffer *v;
	size_t n;
	int e = alloc_list(&v, &n);
	for (size_t at = 0; !e && at < n; at += BUF_BATCH) {
		size_t k = n - at < BUF_BATCH ? n - at : BUF_BATCH;
		e = wire_send(sock, WIRE_BUFFERS, v + at, (uint32_t)(k * sizeof(*v)), (uint32_t)k, NULL, 0);
	}
	free(v);
	return e ? e : wire_send(sock, WIRE_END, NULL, 0, (uint32_t)n, NULL, 0);
}

/* Sends the communicators v (n; e: nccl_list's answer) in batches, then
 * END; frees v. */
static int send_comms(int sock, int e, wire_nccl_comm *v, size_t n)
{
	const size_t batch = WIRE_MAX_PAYLOAD / sizeof(*v);
	for (size_t at = 0; !e && at < n; at += batch) {
		size_t k = n - at < batch ? n - at : batch;
		e = wire_send(sock, WIRE_NCCL, v + at, (uint32_t)(k * sizeof(*v)), (uint32_t)k, NULL, 0);
	}
	free(v);
	return e ? e : wire_send(sock, WIRE_END, NULL, 0, (uint32_t)n, NULL, 0);
}

static int serve_nccl(int sock)
{
	wire_nccl_comm *v;
	size_t n;
	int e = nccl_list(&v, &n);
	return send_comms(sock, e, v, n);
}

static int emit_kernels(const void *payload, uint32_t len, uint32_t count, void *arg)
{
	return wire_send(*(int *)arg, WIRE_KERNELS, payload, len, count, NULL, 0);
}

static int serve_kernels(int sock)
{
	int e = module_list(emit_kernels, &sock);
	return e ? e : wire_send(sock, WIRE_END, NULL, 0, 0, NULL, 0);
}

/* The process's GPUs as it sees them, before its memory: a restore onto
 * other GPUs changes the UUIDs behind its ordinals, and the image records
 * those. Nothing is sent by a process that has no CUDA yet. */
static int send_devices(int sock)
{
	REAL(CUresult, cuDeviceGetCount, (int *));
	REAL(CUresult, cuDeviceGet, (CUdevice *, int));
	REAL(CUresult, cuDeviceGetUuid_v2, (CUuuid *, CUdevice));
	wire_device v[64];
	int n = 0;
	if (real_cuDeviceGetCount(&n) != CUDA_SUCCESS || n <= 0)
		return 0;
	if (n > 64)
		n = 64;
	for (int i = 0; i < n; i++) {
		CUdevice d;
		CUuuid u;
		if (real_cuDeviceGet(&d, i) != CUDA_SUCCESS || real_cuDeviceGetUuid_v2(&u, d) != CUDA_SUCCESS)
			return 0;
		v[i] = (wire_device){ .ordinal = (uint32_t)i };
		memcpy(v[i].uuid, u.bytes, sizeof(v[i].uuid));
	}
	return wire_send(sock, WIRE_DEVICES, v, (uint32_t)((size_t)n * sizeof(*v)), (uint32_t)n, NULL, 0);
}

/* Objects handed over by the park under way, for PHOS_DEBUG's log.
 * Control thread only. */
static int emitted;

static int emit_objects(const wire_object *objs, const int *fds, int n, void *arg)
{
	emitted += n;
	return wire_send(*(int *)arg, WIRE_OBJECTS, objs, (uint32_t)(n * (int)sizeof(*objs)), (uint32_t)n, fds, n);
}

/* Milliseconds from t0 to now (table_now_ns), for PHOS_DEBUG's log. */
static double ms_since(uint64_t t0)
{
	return (double)(table_now_ns() - t0) / 1e6;
}

/* Waits for phosfs's wake-up signal (blocked in this thread). Returns
 * the pid phosfs knows us by (wire_wake): ours in the host's pid
 * namespace, which getpid does not tell inside a namespace of our own. */
static pid_t wait_wake(void)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, WIRE_WAKE_SIGNAL);
	siginfo_t si;
	while (sigwaitinfo(&set, &si) < 0 && errno == EINTR)
		;
	return si.si_code == SI_QUEUE && si.si_value.sival_int > 0 ? (pid_t)si.si_value.sival_int : getpid();
}

/* What device memory is not back (parked, or not yet come): a VMM
 * object first, else an allocation's; into what (len bytes). */
static void missing(char *what, size_t len)
{
	if (!vmm_missing(what, len))
		alloc_missing(what, len);
}

/* After park: reconnect, take the objects back, resume. */
static int unpark(void)
{
	pid_t known_as = wait_wake();
	int sock;
	for (int tries = 0; (sock = wire_connect_resume(known_as)) < 0 &&
			    (sock = wire_connect(wire_socket_path())) < 0;
	     tries++) {
		if (tries == 50)
			tr_log("cannot reach phosfs to unpark (%s); still trying", strerror(-sock));
		usleep(100000);
	}
	atomic_store(&live_sock, sock);
	int e = hello(sock, WIRE_HELLO_RESUME);
	static wire_object recs[WIRE_MAX_PAYLOAD / sizeof(wire_object)];
	int fds[WIRE_MAX_FDS], nfds;
	while (!e) {
		wire_header h;
		e = wire_recv(sock, &h, recs, sizeof(recs), fds, &nfds);
		if (e)
			break;
		if (h.type == WIRE_OBJECTS && h.count == (uint32_t)nfds && h.length == h.count * sizeof(wire_object)) {
			int r = alloc_unpark(recs, fds, nfds);
			if (!r || r == -EAGAIN) {
				int rv = vmm_unpark(recs, fds, nfds);
				r = rv ? rv : r;
			}
			if (r && r != -EAGAIN) {
				tr_log("unpark failed: %s", strerror(-r));
				e = r;
			}
		} else if (h.type == WIRE_COW && h.length == sizeof(wire_cow) && nfds >= 1) {
			int r = cow_begin((const wire_cow *)recs, fds, nfds);
			if (r) {
				/* The checkpoint fails; the process still resumes at UNPARK. */
				tr_log("cannot take part in the CoW checkpoint: %s", strerror(-r));
				char msg[128];
				snprintf(msg, sizeof(msg), "cannot take part in the CoW checkpoint: %s", strerror(-r));
				send_error(sock, msg);
			}
		} else if (h.type == WIRE_LAZY && h.length == sizeof(wire_cow) && nfds >= 2) {
			int r = lazy_begin((const wire_cow *)recs, fds, nfds);
			if (r) {
				char msg[128];
				snprintf(msg, sizeof(msg), "cannot take the lazy restore's table: %s", strerror(-r));
				tr_log("%s", msg);
				send_error(sock, msg);
			}
		} else if (h.type == WIRE_UNPARK) {
			/* A lazy restore sends the tracer's objects later, and
			 * perhaps none now: the application's must all be back.
			 * What had no objects to send is back as it is. */
			if (!lazy_active())
				alloc_unpark(NULL, NULL, 0);
			vmm_unpark(NULL, NULL, 0);
			if ((alloc_parked() && !lazy_active()) || vmm_parked()) {
				char what[160], msg[256];
				missing(what, sizeof(what));
				snprintf(msg, sizeof(msg), "unpark: some device memory did not come back: %s", what);
				tr_log("%s", msg);
				send_error(sock, msg);
				e = -ENOENT;
			} else {
				uint64_t t0 = table_now_ns();
				ipc_unpark();
				ctx_stack_restore();
				tr_debug("unpark: the stack limits set back in %.1f ms", ms_since(t0));
				e = wire_send(sock, WIRE_UNPARKED, NULL, 0, 0, NULL, 0);
				gate_resume();
				nccl_cut_end();
				break;
			}
		} else {
			send_error(sock, "unexpected message while unparking");
		}
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
	}
	if (e)
		tr_log("unpark did not complete (%s): the process stays stopped", strerror(-e));
	return sock;
}

/* PARK's or TRACK's deadlines, from its payload (h, buf). */
static wire_park deadlines(const wire_header *h, const void *buf)
{
	wire_park p = { WIRE_PARK_DEFAULT_MS, WIRE_PARK_DEFAULT_MS, 0, 0 };
	if (h->length >= 2 * sizeof(uint32_t) && h->length <= sizeof(p))
		memcpy(&p, buf, h->length);
	if (!p.timeout_ms)
		p.timeout_ms = WIRE_PARK_DEFAULT_MS;
	if (!p.held_ms)
		p.held_ms = WIRE_PARK_DEFAULT_MS;
	return p;
}

/* Quiesces within p's deadline; else opens the gate again and answers
 * ERROR, saying what held it (`what`: "park", "track"). Returns 0 when
 * quiesced, 1 when answered, or a send's error. */
static int quiesce(int sock, const wire_park *p, const char *what)
{
	char why[192], msg[320];
	int r = gate_quiesce((int)p->timeout_ms, why, sizeof(why));
	if (!r)
		return 0;
	gate_resume();
	if (r == -ETIMEDOUT)
		snprintf(msg, sizeof(msg), "cannot %s within %u ms: %s", what, p->timeout_ms, why);
	else
		snprintf(msg, sizeof(msg), "cannot %s: %s", what, why);
	tr_log("%s; running on", msg);
	int e = send_error(sock, msg);
	return e ? e : 1;
}

/* Waits for phosfs's HELD: phosfs then holds every fd sent. Anything
 * else, or nothing in ms, and the memory stays ours. */
static bool held(int sock, uint32_t ms)
{
	static uint8_t buf[WIRE_MAX_PAYLOAD];
	struct pollfd pf = { sock, POLLIN, 0 };
	int ready, fds[WIRE_MAX_FDS], nfds = 0;
	while ((ready = poll(&pf, 1, (int)ms)) < 0 && errno == EINTR)
		;
	wire_header h = { 0 };
	if (ready != 1 || wire_recv(sock, &h, buf, sizeof(buf), fds, &nfds))
		return false;
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	return h.type == WIRE_HELD;
}

/* The deadline of the cut under way, from its CUT (ms). Control thread
 * only. */
static uint32_t cut_ms;

/* CUT: holds NCCL operations back and answers the counts. If no TARGETS
 * come by the deadline (phosfs is gone or stuck), the cut ends. */
static int serve_cut(int sock, const wire_header *h, const void *payload)
{
	cut_ms = deadlines(h, payload).timeout_ms;
	wire_nccl_comm *v;
	size_t n;
	int e = nccl_cut_begin(&v, &n);
	e = send_comms(sock, e, v, n);
	struct pollfd pf = { sock, POLLIN, 0 };
	int ready = 0;
	while (!e && (ready = poll(&pf, 1, (int)cut_ms + 2000)) < 0 && errno == EINTR)
		;
	if (e || ready != 1) {
		tr_log("the checkpoint's cut got no targets in time: running on");
		nccl_cut_end();
	}
	return e;
}

/* TARGETS (records in payload): runs each communicator up to its target,
 * within the cut's deadline; CUT_DONE, or ERROR saying which is short. */
static int serve_targets(int sock, const wire_header *h, const void *payload)
{
	if (h->length != h->count * sizeof(wire_nccl_target)) {
		nccl_cut_end();
		return send_error(sock, "malformed targets");
	}
	char why[160], msg[240];
	uint64_t deadline = table_now_ns() + (uint64_t)(cut_ms ? cut_ms : WIRE_PARK_DEFAULT_MS) * 1000000u;
	int r = nccl_cut_reach(payload, h->count, deadline, why, sizeof(why));
	if (!r)
		return wire_send(sock, WIRE_CUT_DONE, NULL, 0, 0, NULL, 0);
	nccl_cut_end();
	snprintf(msg, sizeof(msg), "cannot reach the cut within %u ms: %s", cut_ms, why);
	tr_log("%s; running on", msg);
	return send_error(sock, msg);
}

/* Why this process's device memory cannot be handed over now, into why
 * (len bytes): memory it cannot export (unless keep: the driver's
 * checkpoint saves it where it is), memory of another process the driver
 * cannot restore, or memory a restore has not brought back (an object
 * freed before it came back no longer counts). False when it can. */
static bool unparkable(bool keep, char *why, size_t len)
{
	if ((!keep && alloc_stop_only(why, len)) || vmm_shared(why, len))
		return true;
	if (!alloc_parked() && !vmm_parked())
		return false;
	char what[120];
	missing(what, sizeof(what));
	snprintf(why, len, "device memory of its restore is not back (%s)", what);
	tr_log("%s", why);
	return true;
}

/* PARK: quiesce, hand every object over, and, once phosfs holds them all
 * (HELD), let go of them; with WIRE_PARK_KEEP, hand nothing over and keep
 * it all (the driver's checkpoint saves it). Returns 1 when parked (the caller detaches), 0
 * when the process runs on (phosfs was told why, or chose so), or a
 * send's error. */
static int park(int sock, const wire_header *h, const void *payload)
{
	char why[200], msg[256];
	uint64_t t0 = table_now_ns();
	wire_park p = deadlines(h, payload);
	bool keep = p.flags & WIRE_PARK_KEEP;
	if (unparkable(keep, why, sizeof(why))) {
		snprintf(msg, sizeof(msg), "cannot park: %s", why);
		return send_error(sock, msg);
	}
	/* A recopy's tracking ends at its final park, once the gate is
	 * closed: every write before it is marked. */
	bool tracking = cow_tracking();
	if (!tracking && cow_settle() == -EBUSY)
		return send_error(sock, "cannot park: the last checkpoint is still being copied");
	double settled = ms_since(t0);
	int e = quiesce(sock, &p, "park");
	if (e)
		return e == 1 ? 0 : e;
	double quiesced = ms_since(t0);
	if (tracking && cow_track_end()) {
		gate_resume();
		return send_error(sock, "cannot park: the recopy's tracking did not end");
	}
	emitted = 0;
	e = send_devices(sock);
	if (!e && !keep)
		e = alloc_export(emit_objects, &sock);
	if (!e && !keep)
		e = vmm_export(emit_objects, &sock);
	if (!e)
		e = wire_send(sock, WIRE_PARKED, NULL, 0, 0, NULL, 0);
	double sent = ms_since(t0);
	if (!e && held(sock, p.held_ms)) {
		double got = ms_since(t0);
		/* No handle is served while parked: CRIU would keep the socket. */
		ipc_park();
		if (!keep) {
			alloc_release();
			vmm_let_go();
		}
		double released = ms_since(t0);
		int lowered = ctx_stack_shrink();
		tr_debug("park: arrived at %.3f s (CLOCK_MONOTONIC), settled at %.1f ms, quiesced at %.1f ms, %d objects "
			 "handed over at %.1f ms, held at %.1f ms, released at %.1f ms, the stack limit of %d "
			 "contexts lowered at %.1f ms",
			 (double)t0 / 1e9, settled, quiesced, emitted, sent, got, released, lowered, ms_since(t0));
		return 1;
	}
	/* phosfs does not hold them, or is gone: the memory is still ours. */
	gate_resume();
	if (!e)
		tr_log("phosfs did not keep the parked memory: running on");
	return e;
}

#define TRACK_TABLE_TIMEOUT_MS 30000

/* A recopy's first step: quiesce, hand over every object while keeping
 * it mapped, take the TRACK table, run again. */
static int track(int sock, const wire_header *req, const void *payload)
{
	char why[200], msg[256];
	if (unparkable(false, why, sizeof(why))) {
		snprintf(msg, sizeof(msg), "cannot track: %s", why);
		return send_error(sock, msg);
	}
	if (cow_settle() == -EBUSY)
		return send_error(sock, "cannot track: the last checkpoint is still being copied");
	wire_park p = deadlines(req, payload);
	int q = quiesce(sock, &p, "track");
	if (q)
		return q == 1 ? 0 : q;
	int e = alloc_export(emit_objects, &sock);
	if (!e)
		e = wire_send(sock, WIRE_TRACKED, NULL, 0, 0, NULL, 0);
	static uint8_t buf[WIRE_MAX_PAYLOAD];
	int fds[WIRE_MAX_FDS], nfds = 0;
	wire_header h = { 0 };
	int r = -ETIMEDOUT;
	/* The gate is closed until the table comes: not for ever. A malformed
	 * answer costs the table, not the connection. */
	struct pollfd pf = { sock, POLLIN, 0 };
	int ready = 0;
	while (!e && (ready = poll(&pf, 1, TRACK_TABLE_TIMEOUT_MS)) < 0 && errno == EINTR)
		;
	if (!e && ready == 1) {
		r = wire_recv(sock, &h, buf, sizeof(buf), fds, &nfds);
		if (r && r != -EPROTO)
			e = r;
		else if (!r && h.type == WIRE_COW && h.length == sizeof(wire_cow) && nfds >= 2)
			r = cow_begin((const wire_cow *)buf, fds, nfds);
		else if (!r && h.type != WIRE_END) /* END: nothing to track */
			r = -EPROTO;
	}
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	/* Whatever happened, the process runs on. */
	gate_resume();
	if (e)
		return e;
	if (r) {
		snprintf(msg, sizeof(msg), "cannot track: %s", strerror(-r));
		return send_error(sock, msg);
	}
	return wire_send(sock, WIRE_UNPARKED, NULL, 0, 0, NULL, 0);
}

/* A lazy restore's objects arrived (records in buf, their fds): maps
 * them, lets the calls waiting for them go on, and closes the fds. */
static void arrive(int sock, const wire_header *h, const void *buf, int *fds, int nfds)
{
	int e = -EPROTO;
	if (h->count == (uint32_t)nfds && h->length == h->count * sizeof(wire_object)) {
		e = alloc_arrive(buf, fds, nfds);
		/* Even after a failure: calls waiting then fail in the driver
		 * rather than wait for ever. */
		lazy_arrived(buf, nfds);
	}
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	if (e) {
		char msg[160];
		snprintf(msg, sizeof(msg), "device memory that came back could not be mapped again: %s", strerror(-e));
		tr_log("%s", msg);
		send_error(sock, msg);
	}
}

/* Serves one connection until it ends; returns the socket to go on with
 * (another one after a park), or -1. */
static int serve(int sock)
{
	static uint8_t buf[WIRE_MAX_PAYLOAD];
	int fds[WIRE_MAX_FDS], nfds;
	for (;;) {
		wire_header h;
		int e = wire_recv(sock, &h, buf, sizeof(buf), fds, &nfds);
		if (!e && h.type == WIRE_OBJECTS && lazy_active()) {
			arrive(sock, &h, buf, fds, nfds);
			continue;
		}
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		if (e == -EPROTO) {
			send_error(sock, "malformed message");
			continue;
		}
		if (e) {
			/* A lazy restore's job that is gone brings nothing more;
			 * a cut it began ends. */
			lazy_end();
			nccl_cut_end();
			atomic_store(&live_sock, -1);
			close(sock);
			return -1;
		}
		if (lazy_active() && (h.type == WIRE_PARK || h.type == WIRE_TRACK)) {
			e = send_error(sock, "cannot checkpoint: the restore is still bringing device memory back");
			continue;
		}
		switch (h.type) {
		case WIRE_END:
			/* The lazy restore is complete: its job closes the connection. */
			lazy_end();
			break;
		case WIRE_LIST:
			e = serve_list(sock);
			break;
		case WIRE_KERNELS:
			e = serve_kernels(sock);
			break;
		case WIRE_NCCL:
			e = serve_nccl(sock);
			break;
		case WIRE_CUT:
			e = serve_cut(sock, &h, buf);
			break;
		case WIRE_TARGETS:
			e = serve_targets(sock, &h, buf);
			break;
		case WIRE_CUT_END:
			nccl_cut_end();
			break;
		case WIRE_TRACK:
			e = track(sock, &h, buf);
			break;
		case WIRE_PARK:
			e = park(sock, &h, buf);
			if (e != 1)
				nccl_cut_end(); /* it runs on */
			if (e == 1) {
				/* Nothing shared with phosfs stays open while parked. */
				state_close();
				atomic_store(&live_sock, -1);
				close(sock);
				return unpark();
			}
			break;
		default:
			e = send_error(sock, "unknown request");
		}
		if (e) {
			atomic_store(&live_sock, -1);
			close(sock);
			return -1;
		}
	}
}

static void *control_main(void *arg)
{
	(void)arg;
	/* Named by the thread itself: pthread_setname_np on another thread
	 * writes /proc/self/task/TID/comm with the tid this process sees,
	 * which is not the host /proc's inside a pid namespace of its own. */
	pthread_setname_np(pthread_self(), "phos-control");
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, WIRE_WAKE_SIGNAL);
	for (;;) {
		int sock = wire_connect(wire_socket_path());
		if (sock < 0) {
			/* phosfs is not there (yet): look again in a second. */
			struct timespec ts = { 1, 0 };
			sigtimedwait(&set, NULL, &ts);
			continue;
		}
		atomic_store(&live_sock, sock);
		if (hello(sock, 0)) {
			atomic_store(&live_sock, -1);
			close(sock);
			continue;
		}
		while (sock >= 0)
			sock = serve(sock);
	}
	return NULL;
}

/* In a child forked from a traced process (a DataLoader worker): CUDA is
 * not fork-safe, so the child never uses the GPU, and it has no control
 * thread. It must not keep what the parent shares with phosfs: a copy of
 * the connection would keep it open (and CRIU cannot dump a socket whose
 * peer is outside the tree), and the state table is the parent's. */
static void forked_child(void)
{
	int s = atomic_exchange(&live_sock, -1);
	if (s >= 0)
		close(s);
	state_close();
	cow_forget();
	lazy_forget();
	/* The fds of the parent's device memory would keep it alive. */
	alloc_forget_fds();
	vmm_forget_fds();
	ipc_forget();
	nccl_forked();
}

static void start(void)
{
	pthread_atfork(NULL, NULL, forked_child);
	/* A stray process-wide wake signal must not kill the application;
	 * blocked in the control thread, it still reaches sigwaitinfo there. */
	struct sigaction sa = { .sa_handler = SIG_IGN };
	sigaction(WIRE_WAKE_SIGNAL, &sa, NULL);
	sigset_t set, old;
	sigemptyset(&set);
	sigaddset(&set, WIRE_WAKE_SIGNAL);
	pthread_sigmask(SIG_BLOCK, &set, &old);
	pthread_t t;
	if (pthread_create(&t, NULL, control_main, NULL) == 0) {
		pthread_detach(t);
	} else {
		tr_log("cannot start the control thread: phos cannot checkpoint this process");
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void control_start(void)
{
	pthread_once(&once, start);
}
