/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The scripts in examples/ that users install: the cron script
 * checkpoints every traced process and keeps the newest N checkpoints;
 * the rsync script copies the latest one away, and the process comes back
 * from that copy.
 */
#include "phosfs_test.h"

#define KEEP 2
#define RUNS 4

/* The numbered checkpoints in dir, as "n n …" in ascending order. */
static void numbered(const char *dir, char *out, size_t len)
{
	int have[64] = { 0 };
	DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		char *end;
		long n = strtol(de->d_name, &end, 10);
		if (*de->d_name != '.' && !*end && n > 0 && n < 64)
			have[n] = 1;
	}
	if (d)
		closedir(d);
	*out = 0;
	for (int n = 1; n < 64; n++)
		if (have[n])
			snprintf(out + strlen(out), len - strlen(out), "%s%d", *out ? " " : "", n);
}

int main(void)
{
	rig r;
	rig_require(&r);
	const char *src = getenv("PHOS_SRCDIR");
	char cron[PATH_MAX], rsync_sh[PATH_MAX];
	snprintf(cron, sizeof(cron), "%s/examples/cron/phos-checkpoint-all", src ? src : "..");
	snprintf(rsync_sh, sizeof(rsync_sh), "%s/examples/rsync-backup.sh", src ? src : "..");
	if (access(cron, X_OK) || access(rsync_sh, X_OK))
		skip_all("cannot find examples/ (set PHOS_SRCDIR)");
	plan(4);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	setenv("PHOS_CLI", r.phos, 1);
	pid_t pid = rig_counter(&r, 8);
	char out[160], dir[200], cmd[2 * PATH_MAX], names[256], latest[64] = "", st[4096], line[256];
	rig_out(&r, pid, out, sizeof(out));
	if (!rig_line(out, "count 5", 20000, NULL, 0))
		bail("the counter did not start");

	int good = 0;
	snprintf(cmd, sizeof(cmd), "%s %d", cron, KEEP);
	for (int i = 0; i < RUNS; i++)
		good += system(cmd) == 0;
	snprintf(dir, sizeof(dir), "%s/%d", r.store, (int)pid);
	numbered(dir, names, sizeof(names));
	snprintf(cmd, sizeof(cmd), "%s/latest", dir);
	ssize_t ln = readlink(cmd, latest, sizeof(latest) - 1);
	latest[ln > 0 ? ln : 0] = 0;
	ok(good == RUNS && !strcmp(names, "3 4") && !strcmp(latest, "4"),
	   "%d runs of the cron script make %d checkpoints and keep the newest %d (%s; latest %s)", RUNS, RUNS, KEEP,
	   names, latest);
	long c0 = rig_count(out);
	ok(rig_counts_past(out, c0, 5000), "the process counts on");

	if (system("command -v rsync >/dev/null") != 0) {
		skip("no rsync (make deps installs it)");
		skip("no rsync (make deps installs it)");
		kill(pid, SIGKILL);
		rig_cleanup(&r);
		return done();
	}
	char backup[160], copy[200];
	snprintf(backup, sizeof(backup), "%s/backup", r.dir);
	snprintf(copy, sizeof(copy), "%s/%d-4", backup, (int)pid);
	snprintf(cmd, sizeof(cmd), "%s %d %s >/dev/null", rsync_sh, (int)pid, backup);
	int rs = system(cmd);
	ok(rs == 0 && rig_verify(copy), "the rsync script copies the latest checkpoint, and the copy verifies");

	kill(pid, SIGKILL);
	for (int i = 0; i < 100 && rig_alive(pid); i++)
		usleep(20000);
	int e = rig_restore(&r, copy, &pid, st, sizeof(st));
	if (!e) {
		usleep(300000);
		kill(pid, SIGUSR1);
	}
	ok(!e && rig_line(out, "verify ok", 20000, line, sizeof(line)),
	   "the process comes back from the rsync copy with its device memory intact (%s)", e ? strerror(e) : line);
	kill(pid, SIGKILL);
	rig_cleanup(&r);
	return done();
}
