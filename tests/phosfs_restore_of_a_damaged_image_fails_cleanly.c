/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A restore from a copy of an image whose device data was damaged after
 * it was written (one byte of gpu.data changed, as a bad disk or a bad
 * transfer would):
 *
 *   - eager fails before any process exists, and status names the file
 *     and the offset of the chunk that does not check;
 *   - lazy, whose process runs before its device memory is back (the fill
 *     streams each chunk to the GPU in pieces and checks it at its end),
 *     kills the restored process once the fill finds the damage, and says
 *     so;
 *   - neither writes to the image;
 *   - the undamaged original then restores, and the program checks every
 *     byte of its device memory.
 */
#include "phosfs_test.h"

/* FNV-1a over the bytes of every file of dir (no subdirectories). */
static uint64_t dir_hash(const char *dir)
{
	uint64_t h = 1469598103934665603ull;
	DIR *d = opendir(dir);
	for (struct dirent *de; d && (de = readdir(d));) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		struct stat sb;
		if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
			continue;
		FILE *f = fopen(path, "rb");
		for (int c; f && (c = fgetc(f)) != EOF;)
			h = (h ^ (uint8_t)c) * 1099511628211ull;
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return h;
}

/* Restores dir in mode; the error line of status goes to why. The pid
 * status named, or 0. */
static pid_t try_restore(rig *r, const char *dir, const char *mode, char *why, size_t len)
{
	char st[4096] = "", status[160];
	pid_t p = 0;
	r->restore_mode = mode;
	rig_restore(r, dir, &p, st, sizeof(st));
	p = rig_restored(st);
	/* A lazy restore's job ends once its fill has (or failed). */
	snprintf(status, sizeof(status), "%s/status", r->mnt);
	for (int t = 0; t < 30000; t += 20) {
		if (rig_read(status, st, sizeof(st)) && strstr(st, "job: none"))
			break;
		usleep(20000);
	}
	char *err = strstr(st, "error: ");
	snprintf(why, len, "%.*s", err ? (int)strcspn(err, "\n") : 0, err ? err : "");
	diag("%s restore: %s", mode, why);
	return p;
}

int main(void)
{
	rig r;
	rig_require(&r);
	plan(6);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	pid_t pid = rig_counter(&r, 64);
	char out[160], ctl[160], status[160], last[256], image[PATH_MAX], bad[PATH_MAX], why[1024];
	rig_out(&r, pid, out, sizeof(out));
	rig_files(&r, pid, ctl, status);
	if (!rig_line(out, "count 5", 20000, NULL, 0))
		bail("the counter did not start");
	if (rig_ctl(ctl, "checkpoint stop name=x\n", 23) || !rig_job_done(&r, pid, 30000, last, sizeof(last)) ||
	    !strstr(last, "done"))
		bail("the checkpoint failed: %s", last);
	snprintf(image, sizeof(image), "%s/%d/x", r.store, (int)pid);
	snprintf(bad, sizeof(bad), "%s/bad", r.dir);
	char cmd[2 * PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "cp -r '%s' '%s'", image, bad);
	if (system(cmd) != 0)
		bail("cannot copy the image");

	/* One byte in the middle of gpu.data, inside a chunk's data. */
	char data[PATH_MAX + 16];
	snprintf(data, sizeof(data), "%s/" PHOSIMG_DATA_FILE, bad);
	int fd = open(data, O_RDWR);
	struct stat sb;
	uint8_t byte = 0;
	off_t at = fd >= 0 && fstat(fd, &sb) == 0 ? sb.st_size / 2 : -1;
	if (at <= 0 || pread(fd, &byte, 1, at) != 1)
		bail("cannot read %s", data);
	byte ^= 0x5a;
	if (pwrite(fd, &byte, 1, at) != 1)
		bail("cannot write %s", data);
	close(fd);
	uint64_t before = dir_hash(bad);
	diag("changed byte %lld of %s", (long long)at, data);

	kill(pid, SIGKILL);
	for (int i = 0; i < 100 && rig_alive(pid); i++)
		usleep(20000);
	rig_reap();

	pid_t p = try_restore(&r, bad, "eager", why, sizeof(why));
	ok(p == 0 && strstr(why, "checksum mismatch") && strstr(why, PHOSIMG_DATA_FILE),
	   "an eager restore of the damaged copy fails before any process runs, naming the data file");

	p = try_restore(&r, bad, "lazy", why, sizeof(why));
	for (int i = 0; i < 100 && p > 0 && rig_alive(p); i++)
		usleep(20000);
	ok(strstr(why, "checksum mismatch") && strstr(why, "killed") && !(p > 0 && rig_alive(p)),
	   "a lazy restore of it kills the process it started once the fill finds the damage, and says so");
	/* Its own status, while it is there (the killed process goes with
	 * it), says the same as /status. */
	char pst[4096] = "", pstatus[160];
	snprintf(pstatus, sizeof(pstatus), "%s/%d/status", r.mnt, (int)p);
	int there = p > 0 && rig_read(pstatus, pst, sizeof(pst)) && *pst;
	int said = !there || (strstr(pst, ": failed\n") && strstr(pst, "checksum mismatch"));
	ok(said, "and that process's own status, %s, says the restore failed, and why",
	   there ? "still there" : "gone with it");
	if (!said)
		diag("%s", pst);

	ok(dir_hash(bad) == before, "the restores did not write to the image");

	p = try_restore(&r, image, "lazy", why, sizeof(why));
	ok(p > 0 && rig_alive(p) && strstr(why, "error: none"), "the undamaged image restores (pid %d)", (int)p);
	kill(p, SIGUSR1);
	ok(p > 0 && rig_line(out, "verify ok", 20000, last, sizeof(last)), "and every device byte is intact (%s)", last);

	if (p > 0)
		kill(p, SIGKILL);
	rig_reap();
	rig_unmount(&r, SIGTERM);
	rig_cleanup(&r);
	return done();
}
