/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A job whose processes talk over TCP, as torchrun's agent and its
 * workers do through their store, on a real mount with real CRIU:
 *
 *   phos run -- tcp_app server
 *     tcp_app server     listens on 127.0.0.1, accepts one connection,
 *     │                  and answers each request n with n * 3
 *     └ child            connects, sends 1, 2, 3, … every 10 ms and
 *                        checks each answer
 *
 * The server prints "count N" for each request it answered, after
 * checking that N follows the one before; either side prints a FAILED
 * line and exits on a break. Then:
 *
 *   1. checkpoint stop kill (CRIU ends the job with its connection in
 *      repair mode, so nothing is sent and no port lingers): restored,
 *      the job counts on over the same connection;
 *   2. checkpoint stop (the job runs on over its connection), then the
 *      job is killed and restored at once, and counts on. Its server does
 *      not set SO_REUSEADDR (as NCCL's bootstrap and torchrun's agent do
 *      not), and the killed connection's closed ends linger in TIME_WAIT:
 *      the restore ends those that hold the job's addresses, and says so
 *      in phosfs's log;
 *   3. the image restored again beside the restored job fails, because
 *      its addresses are taken, and status says so;
 *   4. the same with a dual-stack server (on [::]) and an IPv4 client,
 *      whose connection's server end has IPv4-mapped addresses;
 *   5. a job connected to a peer outside it (this test) is not
 *      checkpointed: CRIU would save the connection without holding the
 *      peer off. The checkpoint fails naming the connection, and the job
 *      runs on.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/stat.h>

#include "phosfs_test.h"

/* Whether out has a FAILED line from byte `from` on (shown). */
static int failed_from(const char *out, long from)
{
	FILE *f = fopen(out, "r");
	char l[256];
	int bad = 0;
	if (f && fseek(f, from, SEEK_SET) == 0)
		while (!bad && fgets(l, sizeof(l), f))
			if (!strncmp(l, "FAILED", 6)) {
				diag("%s", l);
				bad = 1;
			}
	if (f)
		fclose(f);
	return bad;
}

static int failed(const char *out)
{
	return failed_from(out, 0);
}

/* The size of file path now. */
static long size_of(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0 ? (long)sb.st_size : 0;
}

/* Kills the job of pid (its namespace's init, so every process of it
 * goes) and waits until pid is gone. */
static void kill_job(pid_t pid)
{
	pid_t root = rig_job_root(pid);
	kill(root, SIGKILL);
	kill(pid, SIGKILL);
	for (int i = 0; i < 250 && (rig_alive(root) || rig_alive(pid)); i++)
		usleep(20000);
	rig_reap();
}

/* How many TCP sockets in TIME_WAIT have port (either end). */
static int time_waits(int port)
{
	FILE *f = fopen("/proc/net/tcp", "r");
	char line[512];
	int n = 0;
	while (f && fgets(line, sizeof(line), f)) {
		unsigned la, lp, ra, rp, st;
		if (sscanf(line, " %*d: %x:%x %x:%x %x", &la, &lp, &ra, &rp, &st) == 5 && st == 6 &&
		    ((int)lp == port || (int)rp == port))
			n++;
	}
	if (f)
		fclose(f);
	return n;
}

/* Starts the job, its server plain, with SO_REUSEADDR ("reuse") or
 * dual-stack ("dual"); its output path into out. Reports its start as a
 * test; 0 when a dual-stack server finds no IPv6 here (then skipped). */
static pid_t start(rig *r, const char *self, const char *mode, char *out)
{
	char *const cmd[] = { (char *)self, "server", (char *)mode, NULL };
	pid_t job = rig_phos_run(r, cmd);
	rig_out(r, job, out, PATH_MAX);
	int up = job > 0 && rig_line(out, "count 20", 15000, NULL, 0);
	if (!up && job > 0 && rig_line(out, "no IPv6", 0, NULL, 0))
		return 0;
	ok(up && !failed(out), "the job's two processes talk over a TCP connection (%d, the server %s)", (int)job,
	   !strcmp(mode, "reuse") ? "with SO_REUSEADDR" : !strcmp(mode, "dual") ? "dual-stack, on [::]" : "plain");
	return job;
}

/* Checkpoints job with cmd as image `name`; reports it as a test. */
static int checkpoint(rig *r, pid_t job, const char *cmd, const char *what)
{
	char path[256], st[4096], last[256] = "";
	snprintf(path, sizeof(path), "%s/%d/ctl", r->mnt, (int)job);
	int e = rig_ctl(path, cmd, strlen(cmd));
	int dumped = e == 0 && rig_job_done(r, job, 30000, last, sizeof(last)) && strstr(last, "done");
	ok(dumped, "%s of a job with an open TCP connection (%s)", what, e ? strerror(e) : last);
	if (!dumped) {
		snprintf(path, sizeof(path), "%s/%d/status", r->mnt, (int)job);
		diag("%s", rig_read(path, st, sizeof(st)) ? st : "");
	}
	return dumped;
}

/* Restores image (its process gone) into *back; whether the restored job
 * then counts 20 past where the output was. Reports it as a test. */
static int restored_counts(rig *r, const char *image, pid_t *back, const char *out, const char *what)
{
	char st[4096] = "";
	long c = rig_count(out), from = size_of(out);
	int e = rig_restore(r, image, back, st, sizeof(st));
	int on = e == 0 && rig_alive(*back) && rig_counts_past(out, c + 20, 10000) && !failed_from(out, from);
	ok(on, "%s, the job counts on over the same connection", what);
	if (!on)
		diag("%s", st);
	return on;
}

/* Checkpoints job with stop kill as image `name`, ends it, and restores
 * the image into *back: two tests, the checkpoint and (what) the restore. */
static void stop_kill_restored(rig *r, pid_t job, const char *name, pid_t *back, const char *out, const char *what)
{
	char cmd[64], image[PATH_MAX];
	snprintf(cmd, sizeof(cmd), "checkpoint stop kill name=%s\n", name);
	int dumped = checkpoint(r, job, cmd, "checkpoint stop kill");
	kill_job(job);
	snprintf(image, sizeof(image), "%s/%d/%s", r->store, (int)job, name);
	if (dumped)
		restored_counts(r, image, back, out, what);
	else
		ok(0, "%s: no image", what);
}

int main(void)
{
	rig r;
	rig_require(&r);
	char self[PATH_MAX];
	rig_app_path("PHOS_TCP_APP", "apps/tcp_app", self);
	plan(14);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	char out[PATH_MAX], image[PATH_MAX], st[4096];

	/* 1. checkpoint stop kill: CRIU ends the job, its connection closed
	 * in repair mode (nothing is sent, no port lingers), and the image
	 * restores at once. */
	pid_t a = start(&r, self, "plain", out);
	pid_t a2 = 0;
	stop_kill_restored(&r, a, "k", &a2, out, "restored after stop kill");

	/* 2. checkpoint stop: the job runs on over its connection; killed
	 * and restored at once, it counts on. Its server has no
	 * SO_REUSEADDR, and the killed connection's ends linger in TIME_WAIT
	 * (unless unread data made the kernel reset it): the restore ends
	 * them. */
	pid_t b = start(&r, self, "plain", out);
	int bport = 0;
	char bl[64];
	if (rig_line(out, "port ", 0, bl, sizeof(bl)))
		bport = atoi(bl + 5);
	int dumped = checkpoint(&r, b, "checkpoint stop name=s\n", "checkpoint stop");
	long c0 = rig_count(out);
	ok(dumped && rig_counts_past(out, c0 + 20, 10000) && !failed(out), "the job counts on over it after the dump");
	snprintf(image, sizeof(image), "%s/%d/s", r.store, (int)b);
	kill_job(b);
	int lingering = time_waits(bport);
	pid_t b2 = 0;
	int back = dumped && restored_counts(&r, image, &b2, out, "killed and restored at once");
	ok(back && (!lingering || (time_waits(bport) == 0 && rig_log_has(&r, "closed connection"))),
	   "the %d closed end%s of its connection in TIME_WAIT (port %d) were ended by the restore", lingering,
	   lingering == 1 ? "" : "s", bport);

	/* 3. The same image beside the restored job: its addresses are
	 * taken, and status says so. */
	pid_t clone = 0;
	int e = back ? rig_restore(&r, image, &clone, st, sizeof(st)) : -1;
	ok(e > 0 && strstr(st, "in use on this machine"), "a second restore beside it fails: its addresses are taken");
	if (e <= 0 || !strstr(st, "in use on this machine"))
		diag("%s", st);
	ok(back && rig_alive(b2) && rig_counts_past(out, rig_count(out) + 5, 5000) && !failed_from(out, size_of(out) / 2),
	   "and the restored job runs on");
	pid_t all[] = { a, a2, b, b2, clone };
	for (size_t i = 0; i < sizeof(all) / sizeof(*all); i++)
		if (all[i] > 0)
			kill_job(all[i]);

	/* 4. A dual-stack server and its IPv4 client: the server's end is
	 * an IPv6 socket with IPv4-mapped addresses, still inside the job. */
	pid_t d = start(&r, self, "dual", out);
	if (d == 0) {
		for (int k = 0; k < 3; k++)
			skip("no IPv6 on this machine");
	} else {
		pid_t d2 = 0;
		stop_kill_restored(&r, d, "d", &d2, out, "restored (dual-stack)");
		if (d2 > 0)
			kill_job(d2);
	}

	/* 5. A connection to a peer outside the job (this test): the
	 * checkpoint fails before anything is parked, status says why, the
	 * job runs on and nothing is published. */
	struct sockaddr_in la = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t ll = sizeof(la);
	int l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&la, sizeof(la)) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&la, &ll))
		bail("cannot listen on 127.0.0.1");
	char port[16];
	snprintf(port, sizeof(port), "%d", ntohs(la.sin_port));
	char *const ccmd[] = { self, "client", port, NULL };
	pid_t c = rig_phos_run(&r, ccmd);
	struct pollfd pl = { .fd = l, .events = POLLIN };
	int peer = c > 0 && poll(&pl, 1, 10000) == 1 ? accept(l, NULL, NULL) : -1;
	rig_out(&r, c, out, sizeof(out));
	char path[256], last[256] = "";
	int started = c > 0 && peer >= 0 && rig_line(out, "count 5", 10000, NULL, 0);
	snprintf(path, sizeof(path), "%s/%d/ctl", r.mnt, (int)c);
	e = started ? rig_ctl(path, "checkpoint stop name=out\n", 25) : -1;
	if (e == 0)
		rig_job_done(&r, c, 30000, last, sizeof(last));
	snprintf(path, sizeof(path), "%s/%d/status", r.mnt, (int)c);
	rig_read(path, st, sizeof(st));
	snprintf(image, sizeof(image), "%s/%d/out", r.store, (int)c);
	long cn = rig_count(out);
	ok(e == 0 && strstr(last, "failed") && strstr(st, "outside the job") && strstr(st, port) &&
		   access(image, F_OK) != 0 && rig_counts_past(out, cn + 5, 5000),
	   "a connection to a peer outside the job fails the checkpoint, naming it; the job runs on, no image");
	if (!strstr(st, "outside the job"))
		diag("%s", st);
	if (c > 0)
		kill_job(c);
	if (peer >= 0)
		close(peer);
	close(l);
	rig_cleanup(&r);
	return done();
}
