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
 *   4. neither copy was written to, and the original image restores: a
 *      clone runs beside the original.
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
	plan(6);
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

	char cut[PATH_MAX], flipped[PATH_MAX], pages[PATH_MAX], core[PATH_MAX];
	snprintf(cut, sizeof(cut), "%s/cut", r.dir);
	snprintf(flipped, sizeof(flipped), "%s/flipped", r.dir);
	int copied = copy_image(image, cut) == 0 && copy_image(image, flipped) == 0;
	int damaged = copied && criu_file(cut, "pages-", pages, sizeof(pages)) && truncate(pages, 4096) == 0;
	FILE *f = damaged && criu_file(flipped, "core-", core, sizeof(core)) ? fopen(core, "r+") : NULL;
	if (f) {
		fseek(f, 16, SEEK_SET);
		int c = fgetc(f);
		fseek(f, 16, SEEK_SET);
		fputc(c ^ 0x40, f);
		fclose(f);
	}
	ok(damaged && f, "two copies: pages-*.img cut to 4096 bytes, one byte of core-*.img changed");

	char err[4096];
	int eager = refused(&r, cut, "eager", 1.0, "pages-", err, sizeof(err)) && strstr(err, "4096 bytes");
	int lazy = refused(&r, cut, "lazy", 1.0, "pages-", err, sizeof(err)) && strstr(err, "4096 bytes");
	ok(eager && lazy, "the cut copy is refused, eager and lazy, within a second, naming the file and its size");
	int sum = refused(&r, flipped, NULL, 1.0, "core-", err, sizeof(err)) && strstr(err, "checksum");
	ok(sum, "the changed copy is refused, naming the file and its checksum");

	struct stat st;
	ok(stat(pages, &st) == 0 && st.st_size == 4096 && rig_verify(image),
	   "the restores wrote to neither copy, and the original image still verifies");

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
