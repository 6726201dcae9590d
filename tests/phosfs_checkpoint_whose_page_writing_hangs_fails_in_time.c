/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A cow checkpoint whose CRIU hangs while it writes the pages, after the
 * job was let go, fails at the dump's deadline, and nothing else is
 * lost:
 *   - phosfs runs a CRIU that, while DIR/hang exists, passes the status
 *     byte on (the tree runs on) and then stops the real CRIU mid-write;
 *   - the checkpoint fails within --dump-timeout and a little, saying
 *     CRIU did not finish in time; status showed the criu-pages step;
 *   - the job ran on all along: host_writer checks all its memory;
 *   - the stopped CRIU is gone (phosfs killed the dump's process group),
 *     and no half image is left; the image before it still verifies;
 *   - with the hang gone, the next checkpoint succeeds; it leaves out of
 *     its image the snapshot clone the killed dump left in host_writer
 *     (a zombie, as nobody reaped it), and reaps it: host_writer has no
 *     children after it; a restore from it holds all the memory.
 */
#include "phosfs_test.h"

#define DUMP_TIMEOUT 4

/* A criu (at path) that runs real, but while dir/hang exists stops the
 * real one once the tree runs on, its pid in dir/stopped-criu. */
static void hanging_criu(const char *real, const char *dir, const char *path)
{
	rig_script(path,
		   "#!/bin/bash\n"
		   "if [[ ! -e '%s/hang' || \" $* \" != *' --snapshot-pages '* ]]; then exec '%s' \"$@\"; fi\n"
		   "fifo='%s/status-fifo'\n"
		   "rm -f \"$fifo\" && mkfifo \"$fifo\" || exit 1\n"
		   "'%s' \"$@\" 3>\"$fifo\" &\n"
		   "c=$!\n"
		   "exec 4<\"$fifo\"\n"
		   "n=$(head -c1 <&4 | tee /dev/fd/3 | wc -c)\n"
		   "[ \"$n\" = 1 ] || { wait $c; exit $?; }\n"
		   "kill -STOP $c\n"
		   "echo $c > '%s/stopped-criu'\n"
		   "sleep 600\n",
		   dir, real, dir, real, dir);
}

/* pid's children, each said in a diagnostic line; how many. */
static int children(pid_t pid)
{
	pid_t c[16];
	int n = rig_children(pid, c, 16);
	for (int i = 0; i < n && i < 16; i++) {
		char sp[64], st[128] = "";
		snprintf(sp, sizeof(sp), "/proc/%d/stat", (int)c[i]);
		rig_read(sp, st, sizeof(st));
		diag("child of %d: %.60s", (int)pid, st);
	}
	return n;
}

static double since(const struct timespec *a)
{
	struct timespec b;
	clock_gettime(CLOCK_MONOTONIC, &b);
	return (double)(b.tv_sec - a->tv_sec) + (double)(b.tv_nsec - a->tv_nsec) / 1e9;
}

int main(void)
{
	rig r;
	rig_require(&r);
	char app[PATH_MAX];
	rig_app_path("PHOS_HOST_WRITER", "apps/host_writer", app);
	plan(8);
	char wrapper[PATH_MAX], flag[PATH_MAX], stopped[PATH_MAX];
	snprintf(wrapper, sizeof(wrapper), "%s/hanging-criu", r.dir);
	snprintf(flag, sizeof(flag), "%s/hang", r.dir);
	snprintf(stopped, sizeof(stopped), "%s/stopped-criu", r.dir);
	hanging_criu(r.criu, r.dir, wrapper);
	snprintf(r.criu, sizeof(r.criu), "%s", wrapper);
	char secs[16];
	snprintf(secs, sizeof(secs), "%d", DUMP_TIMEOUT);
	r.opts[0] = "--dump-timeout";
	r.opts[1] = secs;
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");

	char *const cmd[] = { app, "8", NULL };
	char out[PATH_MAX], last[256] = "", st[4096] = "", ctl[160], status[160], img[PATH_MAX];
	pid_t pid = rig_app_up(&r, cmd, 20000, out);
	if (pid <= 0)
		bail("host_writer did not start");
	rig_files(&r, pid, ctl, status);
	int nverify = 0;
	snprintf(img, sizeof(img), "%s/%d/a", r.store, (int)pid);
	ok(rig_checkpoint(&r, pid, "checkpoint cow name=a\n", last, sizeof(last)) && rig_verify(img),
	   "a cow checkpoint with the real CRIU succeeds");

	int fd = open(flag, O_WRONLY | O_CREAT, 0644);
	close(fd);
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int sent = rig_ctl(ctl, "checkpoint cow name=b\n", 22);
	int ended = !sent && rig_job_done(&r, pid, (DUMP_TIMEOUT + 30) * 1000, last, sizeof(last));
	double took = since(&t0);
	rig_read(status, st, sizeof(st));
	ok(ended && strstr(last, "failed") && strstr(st, "did not finish within") && took < DUMP_TIMEOUT + 5,
	   "with CRIU stuck writing pages, the checkpoint fails in %.1f s (deadline %d s), saying why: %s", took, DUMP_TIMEOUT,
	   last);
	ok(rig_cow_verified(pid, out, &nverify, 10000), "the job ran on, and all its memory checks");

	char buf[32] = "";
	pid_t c = rig_read(stopped, buf, sizeof(buf)) ? (pid_t)atoi(buf) : 0;
	int gone = 0;
	for (int i = 0; c > 0 && i < 100 && !gone; i++, usleep(50000)) {
		char p[64];
		snprintf(p, sizeof(p), "/proc/%d", (int)c);
		gone = access(p, F_OK) != 0 || rig_proc_stat(c, NULL) == 'Z';
	}
	char bimg[PATH_MAX];
	snprintf(bimg, sizeof(bimg), "%s/%d/b", r.store, (int)pid);
	ok(c > 0 && gone && access(bimg, F_OK) != 0 && rig_verify(img),
	   "the stopped CRIU (%d) is gone, no image b is left, and image a still verifies", (int)c);
	diag("host_writer has %d children after the killed dump (its snapshot clone, a zombie)", children(pid));

	unlink(flag);
	snprintf(img, sizeof(img), "%s/%d/c", r.store, (int)pid);
	ok(rig_checkpoint(&r, pid, "checkpoint cow name=c\n", last, sizeof(last)) && rig_verify(img),
	   "without the hang, the next cow checkpoint succeeds: %s", last);
	int kids = children(pid);
	ok(kids == 0, "after it, host_writer has no stray children: CRIU reaped the clone the killed dump left (%d)",
	   kids);
	ok(rig_cow_verified(pid, out, &nverify, 10000), "the job still runs, and all its memory checks");
	int back = rig_kill_restore(&r, &pid, 1, img, st, sizeof(st));
	ok(back && rig_cow_verified(pid, out, &nverify, 10000), "restored from c, all its memory checks (pid %d)",
	   (int)pid);
	kill(pid, SIGKILL);
	rig_cleanup(&r);
	return done();
}
