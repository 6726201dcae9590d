/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * CRIU's failures reach status as their real cause, with what they name
 * and what to do, never as the harmless warning CRIU prints first here
 * ("Can't setup RLIMIT_NOFILE for self"):
 *
 *   - a process's file that grew after the dump: the restore fails, and
 *     /status names the file and says to use `phos run`;
 *   - phosfs without CAP_SYS_RESOURCE, asked to checkpoint another user's
 *     process: it said so once at start, and the checkpoint's error says
 *     why; the process runs on;
 *   - the errors that need a GPU to happen (a forked child's /dev/nvidia
 *     mapping and files), a pid taken at restore, connections a server
 *     has not accepted at dump, and an address taken at restore, from
 *     CRIU log lines as CRIU writes them.
 */
#include <linux/capability.h>

#include "../engine/engine.h"
#include "phosfs_test.h"

static void write_log(const char *path, const char *body)
{
	FILE *f = fopen(path, "w");
	if (!f)
		bail("cannot write %s", path);
	fputs("(00.001) Error (criu/util.c:1533): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted\n",
	      f);
	fputs(body, f);
	fclose(f);
}

static void explained(rig *r)
{
	char log[160], why[1500];
	snprintf(log, sizeof(log), "%s/canned.log", r->dir);
	write_log(log, "(00.2) Error (criu/proc_parse.c:632): Can't handle non-regular mapping on 4242's map 200600000\n"
		       "(00.2) Error (criu/cr-dump.c:1570): Collect mappings (pid: 4242) failed with -1\n");
	criu_explain(log, 4240, why, sizeof(why));
	ok(!strncmp(why, "Can't handle non-regular mapping on 4242's map 200600000", 56) &&
		   strstr(why, "process 4242") && strstr(why, "cannot save"),
	   "a device mapping CRIU cannot save: the line, the process and the mapping (%.160s…)", why);

	write_log(log, "(00.3) Error (criu/files.c:529): Can't dump file 7 of that type [20666] (chr 195:255)\n");
	criu_explain(log, 4240, why, sizeof(why));
	ok(strstr(why, "Can't dump file 7") && strstr(why, "--criu-plugins"),
	   "a device file CRIU cannot save: the line, and the plugin to use");

	write_log(log, "(00.3) Error (criu/cr-dump.c:1): Can't get rlimit 0: Operation not permitted\n");
	criu_explain(log, 4240, why, sizeof(why));
	ok(strstr(why, "Can't get rlimit 0") && strstr(why, "CAP_SYS_RESOURCE") && strstr(why, "4240"),
	   "rlimit of another user's process: the capability it lacks");

	write_log(log, "(00.1) 4240: Error (criu/cr-restore.c:1237): Can't fork for 4243: File exists\n");
	criu_explain(log, 0, why, sizeof(why));
	ok(strstr(why, "Can't fork for 4243") && strstr(why, "process 4243") && strstr(why, "old pid"),
	   "a pid taken at restore: which one, and that it must be free");

	write_log(log, "(00.2) Error (criu/sk-inet.c:185): inet: In-flight connection (l) for 1a2b\n"
		       "(00.2) Error (criu/sk-inet.c:186): inet: In-flight connections can be ignored with the "
		       "--skip-in-flight option.\n");
	criu_explain(log, 4240, why, sizeof(why));
	ok(strstr(why, "In-flight connection (l) for 1a2b") && strstr(why, "not accepted"),
	   "connections a server has not accepted at dump: what they are, and to checkpoint again");

	write_log(log, "(00.4) 4240: Error (criu/sk-inet.c:1059): inet: Can't bind inet socket (id 12): Address "
		       "already in use\n");
	criu_explain(log, 0, why, sizeof(why));
	ok(strstr(why, "Can't bind inet socket (id 12)") && strstr(why, "in use on this machine") &&
		   strstr(why, "original"),
	   "a port taken at restore (a server's clone beside its original): that the port must be free");

	write_log(log, "(00.4) 4240: Error (criu/sk-inet.c:1133): inet: Can't connect inet socket back: Cannot assign "
		       "requested address\n");
	criu_explain(log, 0, why, sizeof(why));
	ok(strstr(why, "Can't connect inet socket back") && strstr(why, "in use on this machine"),
	   "a TCP connection whose addresses are taken at restore: the same");

	write_log(log, "(00.4) 4240: Error (criu/files-reg.c:2215): Can't open file dev/shm/torch_19_163_0 on restore: "
		       "No such file or directory\n");
	criu_explain(log, 0, why, sizeof(why));
	ok(strstr(why, "/dev/shm/torch_19_163_0, which is gone") && strstr(why, "phos run --pid-ns"),
	   "a file of the machine's /dev/shm gone at restore: which, and that --pid-ns jobs carry theirs");

	write_log(log, "");
	criu_explain(log, 4240, why, sizeof(why));
	ok(*why == 0, "the harmless warning alone explains nothing");
}

/* Starts phosfs without CAP_SYS_RESOURCE (root on some machines has none). */
static pid_t mount_without_sys_resource(rig *r, const char *log)
{
	pid_t c = fork();
	if (c == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		dup2(fd, 2);
		prctl(PR_CAPBSET_DROP, CAP_SYS_RESOURCE, 0, 0, 0);
		execl(r->phosfs, "phosfs", "--socket", r->sock, "--store", r->store, "--criu", r->criu, "-f", r->mnt,
		      (char *)NULL);
		_exit(127);
	}
	char v[128];
	snprintf(v, sizeof(v), "%s/version", r->mnt);
	return rig_exists(v, 5000) ? c : -1;
}

int main(void)
{
	rig r;
	rig_require(&r);
	plan(13);
	explained(&r);

	/* 1. A file that grows after the dump. */
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	char file[160], path[200], st[4096];
	snprintf(file, sizeof(file), "%s/grows.log", r.dir);
	/* One process with no children (a shell loop would fork a sleep at
	 * every tick, and a tree that changes under the dump is another
	 * matter): it writes a line every 20 ms to a file it opened without
	 * O_APPEND. */
	pid_t g = fork();
	if (g == 0) {
		setsid();
		int nul = open("/dev/null", O_RDWR);
		dup2(nul, 0), dup2(nul, 1), dup2(nul, 2);
		int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		for (;;) {
			if (write(fd, "tick\n", 5) != 5)
				_exit(1);
			usleep(20000);
		}
	}
	usleep(200000);
	snprintf(path, sizeof(path), "%s/%d/ctl", r.mnt, (int)g);
	int e = rig_ctl(path, "checkpoint stop name=g\n", 23);
	char last[256] = "";
	int ck = e == 0 && rig_job_done(&r, g, 20000, last, sizeof(last)) && strstr(last, "done");
	usleep(200000); /* it writes on */
	kill(g, SIGKILL);
	for (int i = 0; i < 100 && rig_alive(g); i++)
		usleep(20000);
	char image[PATH_MAX];
	snprintf(image, sizeof(image), "%s/%d/g", r.store, (int)g);
	e = ck ? rig_restore(&r, image, &g, st, sizeof(st)) : -1;
	ok(ck && e && strstr(st, "has bad size") && strstr(st, "changed size after the checkpoint") &&
		   strstr(st, file) && strstr(st, "phos run") && !strstr(st, "RLIMIT_NOFILE"),
	   "a file that grew: /status names it and says to use phos run");
	if (!strstr(st, "changed size") || !strstr(st, file))
		diag("%s", st);
	if (rig_alive(g))
		kill(g, SIGKILL);

	rig_unmount(&r, SIGTERM);

	/* 2. Another user's process, without CAP_SYS_RESOURCE. */
	char log[160];
	snprintf(log, sizeof(log), "%s/nocap.log", r.dir);
	r.fs = mount_without_sys_resource(&r, log);
	if (r.fs < 0)
		bail("phosfs without CAP_SYS_RESOURCE did not mount");
	char logged[4096] = "";
	rig_read(log, logged, sizeof(logged));
	ok(strstr(logged, "lacks CAP_SYS_RESOURCE") != NULL, "phosfs says at start that CRIU cannot dump other users' processes");
	pid_t u = fork();
	if (u == 0) {
		setsid();
		int nul = open("/dev/null", O_RDWR);
		dup2(nul, 0), dup2(nul, 1), dup2(nul, 2);
		if (setgid(65534) || setuid(65534))
			_exit(126);
		execl("/bin/sleep", "sleep", "60", (char *)NULL);
		_exit(127);
	}
	usleep(200000);
	snprintf(path, sizeof(path), "%s/%d/ctl", r.mnt, (int)u);
	e = rig_ctl(path, "checkpoint stop\n", 16);
	rig_job_done(&r, u, 20000, last, sizeof(last));
	snprintf(path, sizeof(path), "%s/%d/status", r.mnt, (int)u);
	rig_read(path, st, sizeof(st));
	ok(e == 0 && strstr(last, "failed") && strstr(st, "Can't get rlimit") && strstr(st, "CAP_SYS_RESOURCE") &&
		   !strstr(st, "RLIMIT_NOFILE"),
	   "checkpointing another user's process names CRIU's real error and the capability");
	if (!strstr(st, "CAP_SYS_RESOURCE"))
		diag("%s", st);
	ok(rig_alive(u), "and that process runs on");
	kill(u, SIGKILL);
	rig_reap();
	rig_cleanup(&r);
	return done();
}
