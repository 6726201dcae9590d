/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A restore checks the CRIU files it hands to CRIU against the image's
 * manifest before anything starts (a truncated pages-1.img once made
 * CRIU's restored task spin for good, and every restore behind it wait):
 *
 *   1. examples/counter runs under phos run and is checkpointed;
 *   2. a copy of the image with criu/pages-1.img cut to 4096 bytes is
 *      refused, eager and lazy, in well under a second, naming the file
 *      and its sizes; no process was started;
 *   3. a copy with one byte of a CRIU file changed is refused, naming the
 *      file and the checksum;
 *   4. a copy with one byte of the page data (pages-*.img) changed, whose
 *      checksums are checked while CRIU restores, is refused as well:
 *      CRIU's gate stays shut and it kills the tree it restored before
 *      the tree ran, so no second counter is left;
 *   5. no copy was written to, and the original image restores: a clone
 *      runs beside the original.
 */
#include "phosfs_test.h"

/* Copies image into dir with cp -a; 0 on success. */
static int copy_image(const char *image, const char *dir)
{
	char cmd[2 * PATH_MAX + 32];
	snprintf(cmd, sizeof(cmd), "cp -a '%s' '%s'", image, dir);
	return system(cmd);
}

/* The first file of dir/criu whose name starts with prefix, into out. */
static int criu_file(const char *dir, const char *prefix, char *out, size_t len)
{
	char d[PATH_MAX];
	snprintf(d, sizeof(d), "%s/criu", dir);
	DIR *dd = opendir(d);
	int found = 0;
	for (struct dirent *de; dd && !found && (de = readdir(dd));)
		if (!strncmp(de->d_name, prefix, strlen(prefix))) {
			snprintf(out, len, "%.3800s/%s", d, de->d_name);
			found = 1;
		}
	if (dd)
		closedir(dd);
	return found;
}

/* Processes whose name is comm. */
static int count_comm(const char *comm)
{
	DIR *d = opendir("/proc");
	int n = 0;
	for (struct dirent *de; d && (de = readdir(d));) {
		char p[300], name[64] = "";
		snprintf(p, sizeof(p), "/proc/%s/comm", de->d_name);
		FILE *f = de->d_name[0] >= '1' && de->d_name[0] <= '9' ? fopen(p, "r") : NULL;
		if (f && fgets(name, sizeof(name), f) && !strcmp(name, comm))
			n++;
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return n;
}

/* Changes one byte of file at offset. */
static int flip(const char *file, long offset)
{
	FILE *f = fopen(file, "r+");
	if (!f)
		return 0;
	fseek(f, offset, SEEK_SET);
	int c = fgetc(f);
	fseek(f, offset, SEEK_SET);
	fputc(c ^ 0x40, f);
	return fclose(f) == 0 && c != EOF;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Restores dir in mode; 1 when it failed within limit_s, with err
 * holding its error line and what it named. */
static int refused(rig *r, const char *dir, const char *mode, double limit_s, const char *names, char *err,
		   size_t len)
{
	char st[8192] = "";
	pid_t p = 0;
	r->restore_mode = mode;
	double t0 = now_s();
	int e = rig_restore(r, dir, &p, st, sizeof(st));
	double took = now_s() - t0;
	const char *line = strstr(st, "error: ");
	snprintf(err, len, "%.*s", line ? (int)strcspn(line, "\n") : 0, line ? line : "");
	diag("%s restore of %s: %s after %.3f s: %s", mode, dir, e ? strerror(e) : "ok", took, err);
	return (e == EBADMSG || e == ENOENT) && took < limit_s && strstr(err, names) && strstr(err, "nothing was restored");
}

int main(void)
{
	rig r;
	rig_require(&r);
	plan(7);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	pid_t pid = rig_counter(&r, 16);
	char ctl[160], status[160], last[256] = "", image[PATH_MAX];
	rig_files(&r, pid, ctl, status);
	int saved = pid > 0 && rig_traced(&r, pid, 10000) && rig_checkpoint(&r, pid, "checkpoint name=a\n", last, sizeof(last));
	snprintf(image, sizeof(image), "%s/%d/a", r.store, (int)pid);
	ok(saved && rig_verify(image), "examples/counter is checkpointed (%s)", last);
	if (!saved)
		bail("no checkpoint to damage");

	char cut[PATH_MAX], flipped[PATH_MAX], paged[PATH_MAX], pages[PATH_MAX], core[PATH_MAX], data[PATH_MAX];
	snprintf(cut, sizeof(cut), "%s/cut", r.dir);
	snprintf(flipped, sizeof(flipped), "%s/flipped", r.dir);
	snprintf(paged, sizeof(paged), "%s/paged", r.dir);
	int copied = copy_image(image, cut) == 0 && copy_image(image, flipped) == 0 && copy_image(image, paged) == 0;
	int damaged = copied && criu_file(cut, "pages-", pages, sizeof(pages)) && truncate(pages, 4096) == 0;
	int f = damaged && criu_file(flipped, "core-", core, sizeof(core)) && flip(core, 16);
	struct stat ds;
	int g = f && criu_file(paged, "pages-", data, sizeof(data)) && stat(data, &ds) == 0 && ds.st_size > 8192 &&
		flip(data, (long)ds.st_size / 2);
	ok(damaged && f && g, "three copies: pages-*.img cut to 4096 bytes, one byte of core-*.img changed, one byte "
			      "of pages-*.img changed");

	char err[4096];
	int eager = refused(&r, cut, "eager", 1.0, "pages-", err, sizeof(err)) && strstr(err, "4096 bytes");
	int lazy = refused(&r, cut, "lazy", 1.0, "pages-", err, sizeof(err)) && strstr(err, "4096 bytes");
	ok(eager && lazy, "the cut copy is refused, eager and lazy, within a second, naming the file and its size");
	int sum = refused(&r, flipped, NULL, 1.0, "core-", err, sizeof(err)) && strstr(err, "checksum");
	ok(sum, "the changed copy is refused, naming the file and its checksum");
	int before = count_comm("counter\n");
	int page = refused(&r, paged, NULL, 10.0, "pages-", err, sizeof(err)) && strstr(err, "checksum");
	int after = count_comm("counter\n");
	ok(page && after == before, "the copy with a page changed is refused, naming the file and its checksum, and "
				    "the tree CRIU restored is gone (%d counters before, %d after)",
	   before, after);

	struct stat st;
	ok(stat(pages, &st) == 0 && st.st_size == 4096 && rig_verify(image) && !rig_verify(paged),
	   "the restores wrote to no copy (the changed page still fails to verify), and the original image still "
	   "verifies");

	char s[8192];
	pid_t clone = 0;
	r.restore_mode = NULL;
	int back = rig_restore(&r, image, &clone, s, sizeof(s)) == 0 && rig_alive(clone) && clone != pid;
	ok(back, "the original image restores: clone %d runs beside %d", (int)clone, (int)pid);
	if (!back)
		diag("%s", s);
	pid_t all[] = { pid, clone };
	rig_kill_all(all, 2);
	rig_cleanup(&r);
	return done();
}
