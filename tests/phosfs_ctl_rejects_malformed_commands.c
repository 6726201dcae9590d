/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Bad input to ctl: 2,000 fuzzed writes to /<pid>/ctl and 500 to /ctl,
 * mutations of valid commands and random bytes, each get EINVAL and a
 * line in status; the process runs on and no checkpoint appears. A user
 * who does not own the process can neither see /<pid> nor write its ctl.
 */
#include "ctl_fuzz.h"
#include "phosfs_test.h"

static const char *const seeds[] = {
	"checkpoint stop name=a kill\n", "checkpoint cow\n", "checkpoint recopy name=x.y-z\n", "cancel\n",
	"checkpoint\n", "restore /tmp eager\n",
};
static const char *const words[] = { "checkpoint", "cancel", "stop", "cow", "recopy", "kill", "name=", "name=.x",
				     "name=latest", "restore", "\n", " ", "\t", "=", "\0", "\x7f", "checkpoint stop" };
static const ctl_fuzz fuzz = { seeds, sizeof(seeds) / sizeof(*seeds), words, sizeof(words) / sizeof(*words),
				64, false };

/* The grammar, written again from phosfs(8): whether a /<pid>/ctl write
 * would be taken as a command (then the fuzzer does not send it). */
static int valid(const char *s, size_t n)
{
	char b[4200];
	if (n == 0 || n > 4096)
		return 0;
	memcpy(b, s, n);
	if (b[n - 1] == '\n')
		n--;
	b[n] = 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)b[i] < 0x20 && b[i] != '\t')
			return 0;
		else if ((unsigned char)b[i] == 0x7f)
			return 0;
	char *w[16];
	int k = 0;
	for (char *sv, *t = strtok_r(b, " \t", &sv); t; t = strtok_r(NULL, " \t", &sv))
		if (k < 16)
			w[k++] = t;
		else
			return 0;
	if (k > 8 || k == 0)
		return 0;
	if (!strcmp(w[0], "cancel"))
		return 1; /* valid; with no job it also fails, but not as bad input */
	if (strcmp(w[0], "checkpoint"))
		return 0;
	return 1; /* anything after "checkpoint" might be valid: not sent */
}

/* Writes "HEAD WORD\n" to ctl for each of the n words; how many got
 * EINVAL (the others are named). */
static int einval_count(const char *ctl, const char *head, const char *const *words, size_t n)
{
	int k = 0;
	for (size_t i = 0; i < n; i++) {
		char c[128];
		int len = snprintf(c, sizeof(c), "%s %s\n", head, words[i]);
		int e = rig_ctl(ctl, c, (size_t)len);
		k += e == EINVAL;
		if (e != EINVAL)
			diag("'%s' gave %s", words[i], strerror(e));
	}
	return k;
}

int main(void)
{
	rig r;
	rig_require(&r);
	plan(10);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	pid_t pid = rig_counter(&r, 8);
	char out[160], ctl[160], status[160], dir[160], st[4096];
	rig_out(&r, pid, out, sizeof(out));
	snprintf(ctl, sizeof(ctl), "%s/%d/ctl", r.mnt, (int)pid);
	snprintf(status, sizeof(status), "%s/%d/status", r.mnt, (int)pid);
	snprintf(dir, sizeof(dir), "%s/%d", r.mnt, (int)pid);
	if (!rig_line(out, "count 5", 20000, NULL, 0))
		bail("the counter did not start");

	unsigned seed = 12345;
	int sent = 0, einval = 0, other = 0;
	char buf[8192];
	while (sent < 2000) {
		size_t n = ctl_mutate(&fuzz, buf, &seed);
		if (valid(buf, n))
			continue;
		int e = rig_ctl(ctl, buf, n);
		sent++;
		if (e == EINVAL)
			einval++;
		else if (other++ < 5)
			diag("write of %zu bytes gave %s", n, strerror(e));
	}
	/* Oversized and empty writes. */
	memset(buf, 'a', sizeof(buf));
	int big = rig_ctl(ctl, buf, sizeof(buf)), empty = rig_ctl(ctl, "\n", 1);
	ok(sent == 2000 && einval == 2000 && big == EINVAL && empty == EINVAL,
	   "%d of %d fuzzed writes to /<pid>/ctl, an 8 KiB one and an empty one get EINVAL", einval, sent);
	rig_read(status, st, sizeof(st));
	ok(strstr(st, "error: bad command: ") != NULL, "status names the last bad command's error");
	/* A command in two writes on one open ctl: refused as one, named whole. */
	int cfd = open(ctl, O_RDWR);
	errno = 0;
	int w1 = cfd >= 0 && write(cfd, "checkpo", 7) < 0 ? errno : 0;
	errno = 0;
	int w2 = cfd >= 0 && write(cfd, "int stop\n", 9) < 0 ? errno : 0;
	if (cfd >= 0)
		close(cfd);
	rig_read(status, st, sizeof(st));
	ok(w1 == EINVAL && w2 == EINVAL && strstr(st, "a command in two writes, \"checkpo\" then \"int stop\""),
	   "a command split across two writes is refused as one, and status names it whole");
	static const char *const bad_timeouts[] = { "timeout=", "timeout=0", "timeout=-1", "timeout=abc",
						    "timeout=1e9", "timeout=nan", "timeout=inf", "timeout=0.0001",
						    "timeout=1 timeout=1", "timeout=3601", "timeout=5s" };
	size_t nt = sizeof(bad_timeouts) / sizeof(*bad_timeouts);
	ok(einval_count(ctl, "checkpoint stop", bad_timeouts, nt) == (int)nt,
	   "timeouts that are not 0.001 to 3600 seconds, or given twice, get EINVAL");

	char rootctl[160];
	snprintf(rootctl, sizeof(rootctl), "%s/ctl", r.mnt);
	int rsent = 0, reinval = 0;
	while (rsent < 500) {
		size_t n = ctl_mutate(&fuzz, buf, &seed);
		if (n >= 8 && !memcmp(buf, "restore ", 8))
			continue; /* might name a directory */
		rsent++;
		reinval += rig_ctl(rootctl, buf, n) == EINVAL;
	}
	ok(reinval == 500, "%d of 500 fuzzed writes to /ctl get EINVAL", reinval);
	ok(rig_ctl(rootctl, "restore relative/dir\n", 21) == EINVAL, "restore needs an absolute path");
	static const char *const bad_devices[] = { "device=", "device=0", "device=0=1,", "device=0=GPU-zz",
						   "device=0=1 device=1=0", "device=99=0", "device==1", "eager lazy",
						   "device=0=GPU-0123456789abcdef0123456789abcdef0" };
	size_t nd = sizeof(bad_devices) / sizeof(*bad_devices);
	ok(einval_count(rootctl, "restore /tmp", bad_devices, nd) == (int)nd,
	   "malformed device= lists and two modes get EINVAL before anything starts");

	long c0 = rig_count(out);
	int counting = rig_counts_past(out, c0, 5000);
	char ck[200];
	snprintf(ck, sizeof(ck), "%s/%d/checkpoints", r.mnt, (int)pid);
	DIR *d = opendir(ck);
	int entries = 0;
	for (struct dirent *de; d && (de = readdir(d));)
		entries += de->d_name[0] != '.';
	if (d)
		closedir(d);
	ok(rig_alive(pid) && counting && entries == 0, "the process runs on and no checkpoint was made");

	/* User nobody: no /<pid>, no ctl. */
	pid_t c = fork();
	if (c == 0) {
		if (setgid(65534) || setuid(65534))
			_exit(2);
		struct stat sb;
		int seen = stat(dir, &sb) == 0;
		int fd = open(ctl, O_WRONLY);
		int wrote = fd >= 0 && write(fd, "checkpoint stop\n", 16) > 0;
		DIR *md = opendir(r.mnt);
		char name[16];
		snprintf(name, sizeof(name), "%d", (int)pid);
		int listed = 0;
		for (struct dirent *de; md && (de = readdir(md));)
			listed |= !strcmp(de->d_name, name);
		_exit(seen || wrote || listed ? 1 : 0);
	}
	int ws;
	waitpid(c, &ws, 0);
	ok(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "a non-owner can neither see nor list nor write /<pid>");
	c = fork();
	if (c == 0) {
		if (setgid(65534) || setuid(65534))
			_exit(2);
		_exit(rig_ctl(rootctl, "restore /tmp\n", 13) == EACCES ? 0 : 1);
	}
	waitpid(c, &ws, 0);
	ok(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "only root may write /ctl");
	kill(pid, SIGKILL);
	rig_cleanup(&r);
	return done();
}
