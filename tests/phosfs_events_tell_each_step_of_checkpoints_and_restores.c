/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * /events tells a reader each step of a checkpoint and a restore as it
 * happens, one JSON object a line: a cow checkpoint of examples/counter
 * started, stalled, resumed, went off the GPU and was published; a stop
 * --kill checkpoint likewise; a lazy restore of it started, resumed with
 * the new pid and was done; a restore of a damaged copy failed, saying
 * why. poll(2) says when a line is there; a blocking read waits for one;
 * reads of 5 bytes get every line whole, in parts; each reader starts at
 * its open. Needs root and FUSE.
 */
#include <jansson.h>
#include <poll.h>
#include <pthread.h>

#include "phosfs_test.h"

#define EVENTS_MAX 64

typedef struct events {
	int fd;
	json_t *ev[EVENTS_MAX];
	int n;
	char part[8192]; /* a line read in part */
	size_t plen;
} events;

/* Reads what /events has (poll first, up to ms), adding whole lines to
 * e. Returns the number of new events, or -1 on a malformed line. */
static int take(events *e, int ms)
{
	struct pollfd p = { .fd = e->fd, .events = POLLIN };
	int got = 0;
	while (poll(&p, 1, ms) == 1 && (p.revents & POLLIN)) {
		char buf[16384];
		ssize_t n = read(e->fd, buf, sizeof(buf));
		if (n <= 0)
			break;
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] != '\n') {
				if (e->plen + 1 < sizeof(e->part))
					e->part[e->plen++] = buf[i];
				continue;
			}
			e->part[e->plen] = 0;
			e->plen = 0;
			json_t *j = json_loads(e->part, 0, NULL);
			if (!j) {
				diag("not JSON: %s", e->part);
				return -1;
			}
			if (e->n < EVENTS_MAX)
				e->ev[e->n++] = j;
			else
				json_decref(j);
			got++;
		}
		ms = 0;
	}
	return got;
}

/* Reads events until one named `name` (of pid, when > 0) is there at
 * index from or later, or ms passed: its index, or -1. */
static int until(events *e, int from, const char *name, pid_t pid, int ms)
{
	for (int t = 0; t <= ms; t += 100) {
		for (int i = from; i < e->n; i++) {
			const char *ev = json_string_value(json_object_get(e->ev[i], "event"));
			json_t *p = json_object_get(e->ev[i], "pid");
			if (ev && !strcmp(ev, name) && (pid <= 0 || (p && json_integer_value(p) == pid)))
				return i;
		}
		if (take(e, 100) < 0)
			return -1;
	}
	return -1;
}

/* The names of events from..to-1, joined by blanks, into out. */
static const char *names(events *e, int from, int to, char *out, size_t len)
{
	size_t at = 0;
	*out = 0;
	for (int i = from; i < to && at < len; i++)
		at += (size_t)snprintf(out + at, len - at, "%s%s", i > from ? " " : "",
				       json_string_value(json_object_get(e->ev[i], "event")));
	return out;
}

static const char *str(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "";
}

typedef struct blocked {
	char path[160];
	char line[4096];
	ssize_t n;
} blocked;

/* A reader that opens /events without O_NONBLOCK and waits in read. */
static void *blocking_reader(void *arg)
{
	blocked *b = arg;
	int fd = open(b->path, O_RDONLY);
	b->n = fd < 0 ? -1 : read(fd, b->line, sizeof(b->line) - 1);
	if (b->n > 0)
		b->line[b->n] = 0;
	if (fd >= 0)
		close(fd);
	return NULL;
}

/* Checks a checkpoint's events: from `first` on, started … published,
 * each naming pid, name and protocol; stall_ms as status said. */
static void checkpoint_events(events *e, int first, int last, pid_t pid, const char *proto, double stall)
{
	char seq[512];
	bool fields = true;
	for (int i = first; i <= last; i++)
		fields = fields && json_integer_value(json_object_get(e->ev[i], "pid")) == pid &&
			 !strcmp(str(e->ev[i], "protocol"), proto) && *str(e->ev[i], "name") &&
			 json_is_number(json_object_get(e->ev[i], "time")) &&
			 json_integer_value(json_object_get(e->ev[i], "seq")) > 0;
	names(e, first, last + 1, seq, sizeof(seq));
	bool order = !strcmp(proto, "cow")
			     ? !strcmp(seq, "checkpoint.started checkpoint.stalled checkpoint.resumed checkpoint.off_gpu "
					    "checkpoint.published")
			     : strstr(seq, "checkpoint.started checkpoint.stalled") == seq &&
				       strstr(seq, "checkpoint.resumed") && strstr(seq, "checkpoint.off_gpu") &&
				       strstr(seq, "checkpoint.published") == seq + strlen(seq) - 20;
	double said = json_number_value(json_object_get(e->ev[last], "stall_ms"));
	ok(order && fields && said > 0 && said - stall < 0.11 && stall - said < 0.11,
	   "a %s checkpoint's events come in order, each naming its pid, name and protocol: %s; "
	   "published says the stall status says (%.1f ms, status %.1f)",
	   proto, seq, said, stall);
}

int main(void)
{
	rig r;
	rig_require(&r);
	plan(8);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	char path[160], out[160], ctl[160], status[160], last[256], st[8192];
	snprintf(path, sizeof(path), "%s/events", r.mnt);
	events e = { .fd = open(path, O_RDONLY | O_NONBLOCK) };
	if (e.fd < 0)
		bail("cannot open %s: %s", path, strerror(errno));
	struct pollfd p = { .fd = e.fd, .events = POLLIN };
	pid_t pid = rig_counter(&r, 64);
	rig_out(&r, pid, out, sizeof(out));
	rig_files(&r, pid, ctl, status);
	if (!rig_line(out, "count 3", 20000, NULL, 0) || !rig_traced(&r, pid, 10000))
		bail("the counter did not start");
	char buf[64];
	ok(poll(&p, 1, 0) == 0 && read(e.fd, buf, sizeof(buf)) < 0 && errno == EAGAIN,
	   "before any event, poll says nothing to read and a read without waiting is EAGAIN");

	/* 2-3. A cow checkpoint, seen by this reader and by one blocked in read. */
	blocked b = { .n = 0 };
	snprintf(b.path, sizeof(b.path), "%s", path);
	pthread_t th;
	if (pthread_create(&th, NULL, blocking_reader, &b))
		bail("pthread_create");
	usleep(200000);
	if (!rig_checkpoint(&r, pid, "checkpoint cow name=one\n", last, sizeof(last)))
		bail("the cow checkpoint failed: %s", last);
	double stall = rig_stat(rig_read(status, st, sizeof(st)) ? st : "", "stall ms: ");
	int pub = until(&e, 0, "checkpoint.published", pid, 5000);
	int start = until(&e, 0, "checkpoint.started", pid, 0);
	if (pub < 0 || start < 0)
		bail("no checkpoint.started and .published events");
	checkpoint_events(&e, start, pub, pid, "cow", stall);
	pthread_join(th, NULL);
	ok(b.n > 0 && strstr(b.line, "\"event\":\"checkpoint.started\""),
	   "a reader blocked in read(2) before the checkpoint woke with its first event (%zd bytes)", b.n);

	/* 4. stop --kill. */
	int mark = e.n;
	if (!rig_checkpoint(&r, pid, "checkpoint stop name=two kill\n", last, sizeof(last)))
		bail("the stop checkpoint failed: %s", last);
	stall = rig_stat(rig_read(status, st, sizeof(st)) ? st : "", "stall ms: ");
	pub = until(&e, mark, "checkpoint.published", pid, 5000);
	if (pub < mark)
		bail("no event of the stop checkpoint");
	checkpoint_events(&e, mark, pub, pid, "stop", stall);
	for (int i = 0; i < 100 && rig_alive(pid); i++)
		usleep(20000);
	rig_reap();

	/* 5. A lazy restore. */
	char image[PATH_MAX], cmd[4 * PATH_MAX], seq[512];
	snprintf(image, sizeof(image), "%s/%d/two", r.store, (int)pid);
	mark = e.n;
	int small = open(path, O_RDONLY | O_NONBLOCK);
	pid_t back = 0;
	int re = rig_restore(&r, image, &back, st, sizeof(st));
	int fin = re ? -1 : until(&e, mark, "restore.done", 0, 30000);
	bool good = fin >= mark && json_integer_value(json_object_get(e.ev[fin], "pid")) == back &&
		    !strcmp(str(e.ev[fin], "dir"), image) && !strcmp(str(e.ev[fin], "mode"), "lazy") &&
		    json_number_value(json_object_get(e.ev[fin], "resume_ms")) > 0;
	ok(good && !strcmp(names(&e, mark, fin + 1, seq, sizeof(seq)), "restore.started restore.resumed restore.done"),
	   "a lazy restore's events: %s, naming the restored pid %d, the image and the time it took to resume", seq,
	   (int)back);
	kill(back, SIGKILL);

	/* 6. Reads of 5 bytes: every line comes whole, in its parts. */
	static char all[65536];
	size_t got = 0;
	for (ssize_t k; got + 5 < sizeof(all) && (k = read(small, all + got, 5)) > 0;)
		got += (size_t)k;
	all[got] = 0;
	int lines = 0, whole = 0;
	for (char *save = NULL, *l = strtok_r(all, "\n", &save); l; l = strtok_r(NULL, "\n", &save), lines++) {
		json_t *j = json_loads(l, 0, NULL);
		whole += j != NULL;
		json_decref(j);
	}
	close(small);
	ok(fin >= mark && lines == fin - mark + 1 && whole == lines,
	   "a reader that reads 5 bytes at a time gets the same %d events, each line whole", lines);

	/* 7. A restore of a damaged copy fails, and says why. */
	char bad[PATH_MAX + 16];
	snprintf(bad, sizeof(bad), "%s/bad", r.dir);
	snprintf(cmd, sizeof(cmd), "cp -r '%s' '%s' && truncate -s 100 '%s/" PHOSIMG_MANIFEST_FILE "'", image, bad,
		 bad);
	if (system(cmd) != 0)
		bail("cannot damage a copy");
	mark = e.n;
	re = rig_restore(&r, bad, &back, st, sizeof(st));
	int failed = until(&e, mark, "restore.failed", 0, 30000);
	ok(re && failed >= mark && strstr(str(e.ev[failed], "error"), "restore") &&
		   !strcmp(str(e.ev[failed], "dir"), bad),
	   "a restore of a damaged image ends in restore.failed, with the image and why: %s",
	   failed >= 0 ? str(e.ev[failed], "error") : "none");

	/* 8. A new reader starts at its open. */
	int fd2 = open(path, O_RDONLY | O_NONBLOCK);
	ok(fd2 >= 0 && read(fd2, buf, sizeof(buf)) < 0 && errno == EAGAIN,
	   "a reader opened after the events sees none of them");
	if (fd2 >= 0)
		close(fd2);
	for (int i = 0; i < e.n; i++)
		json_decref(e.ev[i]);
	close(e.fd);
	rig_reap();
	rig_cleanup(&r);
	return done();
}
