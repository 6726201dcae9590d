/*
 * Parking and unparking a traced process (common/wire.h): phosfs takes
 * the fds of its device memory, and later gives them back.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine.h"

#define PARK_TIMEOUT_MS 60000   /* quiesce waits for the device to finish */
#define RESUME_TIMEOUT_MS 30000 /* a woken tracer connects again */

void engine_parked_free(engine_parked *p)
{
	for (int i = 0; i < p->n; i++)
		if (p->fds[i] >= 0)
			close(p->fds[i]);
	free(p->objs);
	free(p->fds);
	memset(p, 0, sizeof(*p));
}

static int parked_add(engine_parked *p, const wire_object *objs, const int *fds, int n)
{
	if (p->n + n > p->cap) {
		int cap = p->cap ? p->cap : 256;
		while (cap < p->n + n)
			cap *= 2;
		wire_object *o = realloc(p->objs, (size_t)cap * sizeof(*o));
		if (o)
			p->objs = o;
		int *f = o ? realloc(p->fds, (size_t)cap * sizeof(*f)) : NULL;
		if (!f)
			return -ENOMEM;
		p->fds = f;
		p->cap = cap;
	}
	memcpy(p->objs + p->n, objs, (size_t)n * sizeof(*objs));
	memcpy(p->fds + p->n, fds, (size_t)n * sizeof(*fds));
	p->n += n;
	return 0;
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

int engine_park(int conn, engine_parked *out, char *err, size_t errlen)
{
	static _Thread_local uint8_t buf[WIRE_MAX_PAYLOAD + 1];
	memset(out, 0, sizeof(*out));
	int e = wire_send(conn, WIRE_PARK, NULL, 0, 0, NULL, 0);
	while (!e) {
		wire_header h;
		int fds[WIRE_MAX_FDS], nfds = 0;
		e = readable(conn, PARK_TIMEOUT_MS);
		if (!e)
			e = wire_recv(conn, &h, buf, WIRE_MAX_PAYLOAD, fds, &nfds);
		if (e)
			break;
		if (h.type == WIRE_PARKED)
			return 0;
		if (h.type == WIRE_OBJECTS && h.count == (uint32_t)nfds && h.length == h.count * sizeof(wire_object)) {
			e = parked_add(out, (const wire_object *)buf, fds, nfds);
			if (!e)
				continue;
		} else if (h.type == WIRE_ERROR) {
			buf[h.length < WIRE_MAX_PAYLOAD ? h.length : WIRE_MAX_PAYLOAD] = 0;
			e = engine_fail(-EIO, err, errlen, "the tracer did not park: %s", (char *)buf);
		} else {
			e = engine_fail(-EPROTO, err, errlen, "the tracer answered PARK with message %u", h.type);
		}
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
	}
	engine_parked_free(out);
	if (err && !*err)
		engine_fail(e, err, errlen, "parking failed: %s", strerror(-e));
	return e;
}

int engine_unpark(pid_t pid, const engine_tracer *t, const engine_parked *objs, char *err, size_t errlen)
{
	int e = t->expect(t->arg, pid);
	if (e)
		return engine_fail(e, err, errlen, "cannot wait for the process: %s", strerror(-e));
	pid_t tid = t->control_tid;
	if (syscall(SYS_tgkill, pid, tid, WIRE_WAKE_SIGNAL) != 0) {
		e = -errno;
		t->drop(t->arg, pid);
		return engine_fail(e, err, errlen, "cannot wake the tracer (thread %d): %s", (int)tid, strerror(-e));
	}
	int conn = -1;
	e = t->await(t->arg, pid, RESUME_TIMEOUT_MS, &conn);
	if (e) {
		t->drop(t->arg, pid);
		return engine_fail(e, err, errlen, "the process did not come back to phosfs: %s", strerror(-e));
	}
	const int per = 200;
	for (int at = 0; !e && at < objs->n; at += per) {
		int k = objs->n - at < per ? objs->n - at : per;
		e = wire_send(conn, WIRE_OBJECTS, objs->objs + at, (uint32_t)((size_t)k * sizeof(wire_object)),
			      (uint32_t)k, objs->fds + at, k);
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
		e = engine_fail(-EIO, err, errlen, "the tracer did not unpark: %s", buf);
	} else if (!e && h.type != WIRE_UNPARKED) {
		e = engine_fail(-EPROTO, err, errlen, "the tracer answered UNPARK with message %u", h.type);
	} else if (e) {
		engine_fail(e, err, errlen, "unparking failed: %s", strerror(-e));
	}
	if (e)
		t->drop(t->arg, pid);
	else
		t->adopt(t->arg, pid);
	return e;
}

pid_t engine_find_control_thread(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return -ESRCH;
	pid_t found = -ESRCH;
	struct dirent *de;
	while (found < 0 && (de = readdir(d))) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		char cpath[300], comm[32] = "";
		snprintf(cpath, sizeof(cpath), "/proc/%d/task/%s/comm", (int)pid, de->d_name);
		FILE *f = fopen(cpath, "re");
		if (f) {
			if (fgets(comm, sizeof(comm), f) && !strcmp(comm, "phos-control\n"))
				found = (pid_t)atoi(de->d_name);
			fclose(f);
		}
	}
	closedir(d);
	return found;
}
