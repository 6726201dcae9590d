/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A real phosfs mounted on a temporary directory shows a process running
 * under the tracer: /version, and /<pid>/status, buffers and kernels with
 * what the process did; only root and the process owner can see it; it
 * goes when the process ends; SIGTERM unmounts. Needs root and FUSE.
 */
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>

#include "tracer_test.h"

static char *slurp(const char *path)
{
	static char buf[65536];
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	return buf;
}

static int wait_for(const char *path, int present, int ms)
{
	struct stat st;
	for (int i = 0; i < ms / 20; i++) {
		if ((stat(path, &st) == 0) == present)
			return 1;
		usleep(20000);
	}
	return 0;
}

static int lines(const char *s)
{
	int n = 0;
	for (; s && *s; s++)
		n += *s == '\n';
	return n;
}

/* What user `nobody` gets: 1 if it can see nothing of the process. */
static int hidden_from_nobody(const char *mnt, const char *dir, pid_t pid)
{
	pid_t c = fork();
	if (c == 0) {
		if (setgid(65534) || setuid(65534))
			_exit(2);
		struct stat st;
		char f[PATH_MAX + 16];
		snprintf(f, sizeof(f), "%s/status", dir);
		if (stat(dir, &st) == 0 || fopen(f, "r"))
			_exit(1);
		DIR *d = opendir(mnt);
		char name[16];
		snprintf(name, sizeof(name), "%d", (int)pid);
		for (struct dirent *de; d && (de = readdir(d));)
			if (!strcmp(de->d_name, name))
				_exit(1);
		_exit(d ? 0 : 3);
	}
	int st;
	waitpid(c, &st, 0);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(int argc, char **argv)
{
	TRACER_TEST_MAIN(argc, argv);
	if (geteuid() != 0)
		skip_all("needs root to mount FUSE");
	if (access("/dev/fuse", R_OK | W_OK) != 0)
		skip_all("no /dev/fuse");
	const char *phosfs = test_path("PHOS_PHOSFS", "../phosfs/phosfs");
	char bin[PATH_MAX];
	snprintf(bin, sizeof(bin), "%s", phosfs);
	if (access(bin, X_OK) != 0)
		skip_all("no phosfs binary");
	char mnt[] = "/tmp/phos-mnt-XXXXXX";
	if (!mkdtemp(mnt))
		bail("mkdtemp");
	chmod(mnt, 0755);
	char sock[108], version[PATH_MAX];
	snprintf(sock, sizeof(sock), "/tmp/phosfs-test-%d.sock", (int)getpid());
	snprintf(version, sizeof(version), "%s/version", mnt);
	char errlog[] = "/tmp/phosfs-test-err-XXXXXX";
	int errfd = mkstemp(errlog);
	pid_t fs = fork();
	if (fs == 0) {
		int nul = open("/dev/null", O_WRONLY);
		dup2(nul, 1);
		dup2(errfd, 2);
		execl(bin, "phosfs", "-f", "--socket", sock, mnt, (char *)NULL);
		_exit(127);
	}
	int up = wait_for(version, 1, 5000);
	if (!up) {
		/* A machine where FUSE cannot mount at all is skipped, with
		 * libfuse's reason; a phosfs that fails otherwise is a failure. */
		int st = 0;
		pid_t r = waitpid(fs, &st, WNOHANG);
		const char *err = slurp(errlog);
		unlink(errlog);
		rmdir(mnt);
		if (r == fs && err && strstr(err, "cannot mount")) {
			char reason[200];
			snprintf(reason, sizeof(reason), "FUSE cannot mount here: %.150s", err);
			for (char *c = reason; *c; c++)
				if (*c == '\n')
					*c = ' ';
			skip_all(reason);
		}
		kill(fs, SIGKILL);
		bail("phosfs did not mount: %s", err ? err : "");
	}
	unlink(errlog);
	close(errfd);
	plan(8);
	const char *v = slurp(version);
	ok(v && strstr(v, "phosfs ") && strstr(v, "image format 1.6"), "phosfs mounts and answers /version");

	traced t;
	if (traced_start_at(&t, argv[0], 1, sock))
		bail("the traced program did not start");
	char dir[PATH_MAX], f[PATH_MAX + 16];
	snprintf(dir, sizeof(dir), "%s/%d", mnt, (int)t.pid);
	ok(wait_for(dir, 1, 5000), "the process appears as %s when it registers", dir);

	snprintf(f, sizeof(f), "%s/status", dir);
	const char *s = slurp(f);
	char want[64];
	snprintf(want, sizeof(want), "pid: %d\n", (int)t.pid);
	ok(s && strstr(s, want) && strstr(s, "buffers: 8\n") && strstr(s, "stop-only: no\n"),
	   "status names it, its 8 buffers and that it can be parked");

	snprintf(f, sizeof(f), "%s/buffers", dir);
	s = slurp(f);
	char va[32];
	snprintf(va, sizeof(va), "0x%016llx %llu 0 present", (unsigned long long)t.lay.va[BUF_A],
		 (unsigned long long)t.lay.size[BUF_A]);
	ok(s && lines(s) == APP_LISTED && strstr(s, va), "buffers lists every allocation with its VA, size and state");

	traced_cmd(&t, 'l');
	snprintf(f, sizeof(f), "%s/kernels", dir);
	s = slurp(f);
	ok(s && strstr(s, "1 3 1 4194304 4 0 _Z3addPKfS0_Pfi\n"),
	   "kernels shows add's launch, 3 buffers read and 1 written");

	ok(hidden_from_nobody(mnt, dir, t.pid), "another user can neither list nor open it");

	traced_stop(&t);
	ok(wait_for(dir, 0, 5000), "it goes when the process ends");

	kill(fs, SIGTERM);
	int st;
	waitpid(fs, &st, 0);
	struct stat a, b;
	char parent[] = "/tmp";
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0 && stat(mnt, &a) == 0 && stat(parent, &b) == 0 && a.st_dev == b.st_dev,
	   "SIGTERM unmounts and phosfs exits (status %d)", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	rmdir(mnt);
	return done();
}
