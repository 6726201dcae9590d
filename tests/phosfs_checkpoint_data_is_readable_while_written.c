/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * gpu.data of a checkpoint that is still being written can be read at
 * once, and a reader gets its bytes as they become final: what it read
 * is the published file, byte for byte. If the checkpoint fails, the
 * reader gets EIO rather than a short file.
 *
 * CRIU is run through a wrapper that waits 2 s before each dump (and,
 * while a flag file exists, then fails it), so that the checkpoint is
 * still in progress when the test looks.
 */
#include "phosfs_test.h"

#define MIB 64

/* Reads path into a new buffer until EOF; -errno of the read that failed. */
static int read_all(int fd, uint8_t **out, size_t *len)
{
	size_t cap = 1 << 20, n = 0;
	uint8_t *b = malloc(cap);
	for (;;) {
		if (n == cap)
			b = realloc(b, cap *= 2);
		ssize_t r = read(fd, b + n, cap - n);
		if (r < 0) {
			int e = -errno;
			free(b);
			return e;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	*out = b;
	*len = n;
	return 0;
}

static bool same_as_file(const char *path, const uint8_t *want, size_t len)
{
	int fd = open(path, O_RDONLY);
	uint8_t *got = NULL;
	size_t n = 0;
	bool same = fd >= 0 && read_all(fd, &got, &n) == 0 && n == len && memcmp(got, want, len) == 0;
	free(got);
	if (fd >= 0)
		close(fd);
	return same;
}

int main(void)
{
	rig r;
	rig_require(&r);
	plan(6);
	char wrapper[128], flag[128], script[2 * PATH_MAX + 200];
	snprintf(wrapper, sizeof(wrapper), "%s/slow-criu", r.dir);
	snprintf(flag, sizeof(flag), "%s/fail-dump", r.dir);
	snprintf(script, sizeof(script),
		 "#!/bin/sh\n[ \"$1\" = dump ] && { sleep 2; [ -e %s ] && exit 1; }\nexec %s \"$@\"\n", flag, r.criu);
	int wfd = open(wrapper, O_WRONLY | O_CREAT | O_TRUNC, 0755);
	if (wfd < 0 || write(wfd, script, strlen(script)) != (ssize_t)strlen(script))
		bail("cannot write %s", wrapper);
	close(wfd);
	snprintf(r.criu, sizeof(r.criu), "%s", wrapper);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	pid_t pid = rig_counter(&r, MIB);
	char out[160], ctl[160], status[160], data[256], dir[200], pub[300], st[4096], line[256];
	rig_out(&r, pid, out, sizeof(out));
	if (!rig_line(out, "count 5", 20000, NULL, 0))
		bail("the counter did not start");
	snprintf(ctl, sizeof(ctl), "%s/%d/ctl", r.mnt, (int)pid);
	snprintf(status, sizeof(status), "%s/%d/status", r.mnt, (int)pid);
	snprintf(dir, sizeof(dir), "%s/%d/checkpoints/s", r.mnt, (int)pid);
	snprintf(data, sizeof(data), "%s/gpu.data", dir);

	int e = rig_ctl(ctl, "checkpoint stop name=s\n", 22);
	char first[256] = "";
	DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d)))
		if (de->d_name[0] != '.') {
			snprintf(first, sizeof(first), "%s", de->d_name);
			break;
		}
	if (d)
		closedir(d);
	int fd = open(data, O_RDONLY);
	uint8_t head[4096];
	ssize_t hn = fd >= 0 ? read(fd, head, sizeof(head)) : -1;
	rig_read(status, st, sizeof(st));
	bool busy = strstr(st, "job: checkpoint stop name=s") != NULL;
	ok(e == 0 && !strcmp(first, "gpu.data") && hn == (ssize_t)sizeof(head) && !memcmp(head, "PHDA", 4) && busy,
	   "while the checkpoint runs its directory lists gpu.data first and its header can be read");

	uint8_t *all = NULL;
	size_t len = 0;
	int re = -EBADF;
	if (fd >= 0 && lseek(fd, 0, SEEK_SET) == 0)
		re = read_all(fd, &all, &len);
	if (fd >= 0)
		close(fd);
	rig_job_done(&r, pid, 30000, line, sizeof(line));
	diag("%s", line);
	snprintf(pub, sizeof(pub), "%s/%d/s/gpu.data", r.store, (int)pid);
	/* The data is split over gpu.data, gpu.data.1, … (one per writer). */
	uint64_t total = 0;
	for (int f = 0; f < 64; f++) {
		char p2[PATH_MAX + 16];
		struct stat fst;
		snprintf(p2, sizeof(p2), f ? "%s.%d" : "%s", pub, f);
		if (stat(p2, &fst) == 0)
			total += (uint64_t)fst.st_size;
	}
	ok(re == 0 && strstr(line, ": done") && len > 4096 && total > (uint64_t)MIB << 20,
	   "a reader follows gpu.data to its end while it is written (%zu of the %llu bytes of data files)", len,
	   (unsigned long long)total);
	ok(re == 0 && same_as_file(pub, all, len), "what it read is the published gpu.data, byte for byte");
	free(all);
	snprintf(pub, sizeof(pub), "%s/%d/s", r.store, (int)pid);
	ok(rig_verify(pub), "and the image verifies");

	/* A checkpoint that fails under a reader. */
	int ff = open(flag, O_WRONLY | O_CREAT, 0644);
	if (ff >= 0)
		close(ff);
	e = rig_ctl(ctl, "checkpoint stop name=f\n", 22);
	snprintf(data, sizeof(data), "%s/%d/checkpoints/f/gpu.data", r.mnt, (int)pid);
	fd = open(data, O_RDONLY);
	hn = fd >= 0 ? read(fd, head, sizeof(head)) : -1;
	/* On to the end: the copy may have put all of its data there before
	 * the dump failed (it starts at once), but the file never ends. */
	ssize_t rn = 0;
	int rerr = 0;
	do {
		errno = 0;
		rn = fd >= 0 ? read(fd, head, sizeof(head)) : 0;
		rerr = errno;
	} while (rn > 0);
	if (fd >= 0)
		close(fd);
	rig_job_done(&r, pid, 30000, line, sizeof(line));
	diag("%s", line);
	ok(e == 0 && hn == (ssize_t)sizeof(head) && rn < 0 && rerr == EIO && strstr(line, ": failed"),
	   "a reader of a checkpoint that fails gets EIO, not a short file (%s)", strerror(rerr));
	snprintf(pub, sizeof(pub), "%s/%d/f", r.store, (int)pid);
	ok(access(pub, F_OK) != 0 && rig_alive(pid) && rig_counts_past(out, rig_count(out), 5000),
	   "nothing is published and the process keeps running");
	kill(pid, SIGKILL);
	rig_cleanup(&r);
	return done();
}
