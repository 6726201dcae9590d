/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Parking and unparking a traced process (common/wire.h): phosfs takes
 * the fds of its device memory, and later gives them back.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../common/pidns.h"
#include "cow.h"
#include "park.h"
#include "progress.h"

#define PARK_TIMEOUT_MS 60000   /* each message of a hand-over under way */
#define RESUME_TIMEOUT_MS 30000 /* a woken tracer connects again */

void engine_parked_drop(engine_parked *p)
{
	free(p->objs);
	free(p->fds);
	free(p->pids);
	memset(p, 0, sizeof(*p));
}

void engine_parked_free(engine_parked *p)
{
	for (int i = 0; i < p->n; i++)
		if (p->fds[i] >= 0)
			close(p->fds[i]);
	engine_parked_drop(p);
}

int engine_parked_add(engine_parked *p, const wire_object *objs, const int *fds, pid_t pid, int n)
{
	if (p->n + n > p->cap) {
		int cap = p->cap ? p->cap : 256;
		while (cap < p->n + n)
			cap *= 2;
		wire_object *o = realloc(p->objs, (size_t)cap * sizeof(*o));
		if (o)
			p->objs = o;
		int *f = o ? realloc(p->fds, (size_t)cap * sizeof(*f)) : NULL;
		if (f)
			p->fds = f;
		pid_t *w = f ? realloc(p->pids, (size_t)cap * sizeof(*w)) : NULL;
		if (!w)
			return -ENOMEM;
		p->pids = w;
		p->cap = cap;
	}
	memcpy(p->objs + p->n, objs, (size_t)n * sizeof(*objs));
	memcpy(p->fds + p->n, fds, (size_t)n * sizeof(*fds));
	for (int i = 0; i < n; i++)
		p->pids[p->n + i] = pid;
	p->n += n;
	return 0;
}

int engine_parked_move(engine_parked *to, engine_parked *from)
{
	for (int at = 0; at < from->n;) {
		int k = at + 1;
		while (k < from->n && from->pids[k] == from->pids[at])
			k++;
		int e = engine_parked_add(to, from->objs + at, from->fds + at, from->pids[at], k - at);
		if (e) {
			to->n -= at; /* give back what moved: from still owns it all */
			return e;
		}
		at = k;
	}
	engine_parked_drop(from);
	return 0;
}

engine_parked engine_parked_of(const engine_parked *all, pid_t pid)
{
	engine_parked v = { 0 };
	int at = 0;
	while (at < all->n && all->pids[at] != pid)
		at++;
	int k = at;
	while (k < all->n && all->pids[k] == pid)
		k++;
	if (k > at) {
		v.objs = all->objs + at;
		v.fds = all->fds + at;
		v.pids = all->pids + at;
		v.n = v.cap = k - at;
	}
	return v;
}

/* Waits for a message on sock for at most ms. */
static int readable(int sock, int ms)
{
	struct pollfd pf = { sock, POLLIN, 0 };
	int n;
	while ((n = poll(&pf, 1, ms)) < 0 && errno == EINTR)
		;
	return n > 0 ? 0 : n == 0 ? -ETIMEDOUT : -errno;
}

int engine_recv_within(pid_t pid, int conn, const char *what, int ms, wire_header *h, void *buf, size_t cap,
		       int *fds, int *nfds, perr *er)
{
	*nfds = 0;
	int e = readable(conn, ms);
	if (!e)
		e = wire_recv(conn, h, buf, (uint32_t)cap - 1, fds, nfds);
	if (e == -ETIMEDOUT)
		return pr_err(er, e, "process %d did not answer %s within %d ms (is it stopped, or its tracer's "
				     "control thread stuck?)",
			      (int)pid, what, ms);
	if (e)
		return pr_err(er, e, "process %d did not answer %s: %s", (int)pid, what, strerror(-e));
	if (h->type == WIRE_ERROR) {
		((char *)buf)[h->length < cap - 1 ? h->length : cap - 1] = 0;
		for (int i = 0; i < *nfds; i++)
			close(fds[i]);
		*nfds = 0;
		return pr_err(er, -EIO, "process %d did not %s: %s", (int)pid, what, (char *)buf);
	}
	return 0;
}

int engine_recv(pid_t pid, int conn, const char *what, wire_header *h, void *buf, size_t cap, int *fds, int *nfds,
		perr *er)
{
	return engine_recv_within(pid, conn, what, PARK_TIMEOUT_MS, h, buf, cap, fds, nfds, er);
}

/* Adds a WIRE_OBJECTS or WIRE_DEVICES message (h, buf, fds) to out.
 * Returns 1 when it was neither, else 0 or an error. */
static int take(const wire_header *h, const uint8_t *buf, int *fds, int nfds, pid_t pid, engine_parked *out,
		perr *er)
{
	if (h->type == WIRE_OBJECTS && h->count == (uint32_t)nfds && h->length == h->count * sizeof(wire_object)) {
		int e = engine_parked_add(out, (const wire_object *)buf, fds, pid, nfds);
		return e ? pr_err(er, e, "out of memory") : 0;
	}
	if (h->type == WIRE_DEVICES && !nfds && h->length == h->count * sizeof(wire_device)) {
		for (uint32_t i = 0; i < h->count; i++) {
			wire_device d; /* (buf is not aligned for it) */
			memcpy(&d, buf + (size_t)i * sizeof(d), sizeof(d));
			if (d.ordinal >= PHOSIMG_DEVICES_MAX)
				break;
			memcpy(out->dev_uuid[d.ordinal], d.uuid, 16);
			if (d.ordinal >= out->ndev)
				out->ndev = d.ordinal + 1;
		}
		return 0;
	}
	return 1;
}

int engine_collect(pid_t pid, int conn, uint16_t ask, uint16_t done, const char *what, int timeout_ms,
		   uint32_t flags, engine_parked *out, perr *er)
{
	static _Thread_local uint8_t buf[WIRE_MAX_PAYLOAD + 1];
	memset(out, 0, sizeof(*out));
	/* The tracer answers by its deadline; the grace covers the way. */
	wire_park p = { (uint32_t)timeout_ms, (uint32_t)timeout_ms + ENGINE_HELD_SLACK_MS, flags, 0 };
	int e = wire_send(conn, ask, &p, sizeof(p), 1, NULL, 0);
	if (e)
		return pr_err(er, e, "cannot ask process %d to %s: %s", (int)pid, what, strerror(-e));
	int ms = timeout_ms + ENGINE_ANSWER_GRACE_MS;
	for (;;) {
		wire_header h;
		int fds[WIRE_MAX_FDS], nfds = 0;
		e = engine_recv_within(pid, conn, what, ms, &h, buf, sizeof(buf), fds, &nfds, er);
		ms = PARK_TIMEOUT_MS; /* it answered: the rest is the hand-over */
		if (e)
			break;
		if (h.type == done && !nfds)
			return 0;
		e = take(&h, buf, fds, nfds, pid, out, er);
		if (!e)
			continue;
		if (e == 1)
			e = pr_err(er, -EPROTO, "the tracer answered %s with message %u", what, h.type);
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		break;
	}
	engine_parked_free(out);
	return e;
}

int engine_park(pid_t pid, int conn, int timeout_ms, bool keep, engine_parked *out, perr *er)
{
	return engine_collect(pid, conn, WIRE_PARK, WIRE_PARKED, "park", timeout_ms, keep ? WIRE_PARK_KEEP : 0, out,
			      er);
}

int engine_hold(pid_t pid, int conn, bool *sent, perr *er)
{
	int e = wire_send(conn, WIRE_HELD, NULL, 0, 0, NULL, 0);
	*sent = !e;
	if (e)
		return pr_err(er, e, "cannot tell process %d that its memory is held: %s", (int)pid, strerror(-e));
	/* It closes its end once its memory is released: from then on
	 * nothing of it is on the device, and nothing open to us. */
	uint8_t buf[256];
	wire_header h;
	int fds[WIRE_MAX_FDS], nfds = 0;
	e = readable(conn, PARK_TIMEOUT_MS);
	if (!e && (e = wire_recv(conn, &h, buf, sizeof(buf), fds, &nfds)) == 0) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		e = -EPROTO;
	}
	if (e == -ECONNRESET)
		return 0;
	return pr_err(er, e, "process %d did not let go of its device memory: %s", (int)pid,
		      e == -EPROTO ? "it sent a message instead" : strerror(-e));
}

void engine_decline(int conn, const char *why)
{
	wire_send(conn, WIRE_ERROR, why, (uint32_t)strlen(why) + 1, 0, NULL, 0);
}

/* engine_unpark, and engine_unpark_lazy when keep is not NULL: cow is
 * then the LAZY table, and *keep the connection, kept open. */
static int unpark(pid_t pid, pid_t tid, const engine_tracer *t, const engine_parked *objs,
		  const engine_cow_member *cow, int *keep, perr *er)
{
	int e = t->expect(t->arg, pid);
	if (e)
		return pr_err(er, e, "cannot wait for process %d: %s", (int)pid, strerror(-e));
	e = wire_wake(pid, tid);
	if (e) {
		t->drop(t->arg, pid);
		return pr_err(er, e, "cannot wake process %d's tracer (thread %d): %s", (int)pid, (int)tid, strerror(-e));
	}
	int conn = -1;
	e = t->await(t->arg, pid, RESUME_TIMEOUT_MS, &conn);
	if (e) {
		t->drop(t->arg, pid);
		return pr_err(er, e, "process %d did not come back to phosfs: %s", (int)pid, strerror(-e));
	}
	const int per = 200;
	for (int at = 0; !e && at < objs->n; at += per) {
		int k = objs->n - at < per ? objs->n - at : per;
		e = wire_send(conn, WIRE_OBJECTS, objs->objs + at, (uint32_t)((size_t)k * sizeof(wire_object)),
			      (uint32_t)k, objs->fds + at, k);
	}
	if (!e && cow) {
		wire_cow wc = { .table_bytes = cow->bytes, .pool_bytes = cow->pool_bytes, .pool_device = cow->pool_device };
		int self = (int)syscall(SYS_pidfd_open, getpid(), 0);
		int fds[3] = { cow->fd, self, cow->pool_fd };
		e = self < 0 ? -errno
			     : wire_send(conn, keep ? WIRE_LAZY : WIRE_COW, &wc, sizeof(wc), 1, fds, cow->pool_bytes ? 3 : 2);
		if (self >= 0)
			close(self);
	}
	if (!e)
		e = wire_send(conn, WIRE_UNPARK, NULL, 0, 0, NULL, 0);
	char buf[512];
	wire_header h;
	int fds[WIRE_MAX_FDS], nfds = 0;
	if (!e)
		e = readable(conn, PARK_TIMEOUT_MS);
	if (!e)
		e = wire_recv(conn, &h, buf, sizeof(buf) - 1, fds, &nfds);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	if (!e && h.type == WIRE_ERROR) {
		buf[h.length < sizeof(buf) - 1 ? h.length : sizeof(buf) - 1] = 0;
		e = pr_err(er, -EIO, "the tracer did not unpark: %s", buf);
	} else if (!e && h.type != WIRE_UNPARKED) {
		e = pr_err(er, -EPROTO, "the tracer answered UNPARK with message %u", h.type);
	} else if (e) {
		pr_perror(er, e, "unparking failed");
	}
	if (!e && keep) {
		*keep = fcntl(conn, F_DUPFD_CLOEXEC, 3);
		if (*keep < 0)
			e = pr_err(er, -errno, "cannot keep process %d's connection: %s", (int)pid,
				   strerror(errno));
	}
	if (e)
		t->drop(t->arg, pid);
	else
		t->adopt(t->arg, pid);
	return e;
}

int engine_unpark(pid_t pid, pid_t tid, const engine_tracer *t, const engine_parked *objs,
		  const engine_cow_member *cow, perr *er)
{
	return unpark(pid, tid, t, objs, cow, NULL, er);
}

int engine_unpark_lazy(pid_t pid, pid_t tid, const engine_tracer *t, const engine_parked *objs,
		       const engine_cow_member *lazy, int *conn, perr *er)
{
	*conn = -1;
	return unpark(pid, tid, t, objs, lazy, conn, er);
}

/* Whether thread tid is the tracer's control thread, by its name. */
static bool is_control(pid_t tid, const void *arg)
{
	(void)arg;
	char path[64], comm[32] = "";
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)tid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	bool yes = fgets(comm, sizeof(comm), f) && !strcmp(comm, "phos-control\n");
	fclose(f);
	return yes;
}

pid_t engine_find_control_thread(pid_t pid)
{
	return pidns_task_where(pid, is_control, NULL);
}
