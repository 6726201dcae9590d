/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * An image whose data is split over four files (format 1.3: gpu.data,
 * gpu.data.1, .2, .3; the STRIPES section), written by four threads at
 * once: each file is written, the image reads back byte for byte and
 * verifies, and a reader of it that finds a data file missing, cut short,
 * damaged, or an index entry naming a file that is not there, says so
 * and names the file.
 */
#include <pthread.h>

#include "imgtest.h"

#define CHUNK (64u << 10)
#define NOBJ 4
#define THREADS 4
#define STRIPES 4

static uint64_t sizes[NOBJ];
static uint8_t *data[NOBJ];

typedef struct job {
	phosimg_writer *w;
	int t, err;
} job;

static void *worker(void *arg)
{
	job *j = arg;
	for (int o = 0; o < NOBJ && !j->err; o++)
		for (uint64_t off = (uint64_t)j->t * CHUNK; off < sizes[o] && !j->err; off += THREADS * CHUNK) {
			uint64_t len = sizes[o] - off < CHUNK ? sizes[o] - off : CHUNK;
			j->err = phosimg_writer_put(j->w, (uint32_t)o, off, data[o] + off, (size_t)len);
		}
	return NULL;
}

/* Whether opening and verifying path fails with a message containing what. */
static int refused(const char *path, const char *what)
{
	phosimg *img;
	int e = phosimg_open(path, &img);
	if (!e) {
		e = phosimg_verify(img);
		phosimg_close(img);
	}
	if (e && !strstr(phosimg_last_error(), what))
		diag("message: %s", phosimg_last_error());
	return e && strstr(phosimg_last_error(), what);
}

static void copy_tree(const char *from, const char *to)
{
	char cmd[3 * PATH_MAX];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' && cp -a '%s' '%s'", to, from, to);
	if (system(cmd) != 0)
		bail("cp failed");
}

int main(void)
{
	plan(7);
	char *dir = scratch_dir("striped");
	for (int o = 0; o < NOBJ; o++) {
		sizes[o] = (uint64_t)(o + 2) * 5 * CHUNK + (uint64_t)o * 777;
		data[o] = malloc(sizes[o]);
		fill(data[o], sizes[o], (uint64_t)o + 40, o % 2);
	}
	char path[PATH_MAX], bad[PATH_MAX], f[PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/img", dir);
	snprintf(bad, sizeof(bad), "%s/bad", dir);
	phosimg_writer *w;
	phosimg_writer_opts opts = { .chunk_size = CHUNK, .lz4 = true, .stripes = STRIPES };
	if (phosimg_writer_create(path, &opts, &w))
		bail("create: %s", phosimg_last_error());
	for (int o = 0; o < NOBJ; o++) {
		phosimg_object ob = { .va = 0x200000000ull * (uint64_t)(o + 1), .size = sizes[o] };
		uint32_t id;
		if (phosimg_writer_add_object(w, &ob, &id))
			bail("add: %s", phosimg_last_error());
	}
	pthread_t t[THREADS];
	job j[THREADS];
	for (int i = 0; i < THREADS; i++) {
		j[i] = (job){ w, i, 0 };
		pthread_create(&t[i], NULL, worker, &j[i]);
	}
	int errs = 0;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		errs += j[i].err != 0;
	}
	ok(errs == 0 && phosimg_writer_finish(w) == 0, "%d threads store every chunk over %d data files", THREADS, STRIPES);
	int files = 0;
	for (int s = 1; s < STRIPES; s++) {
		struct stat st;
		snprintf(f, sizeof(f), "%s/gpu.data.%d", path, s);
		files += stat(f, &st) == 0 && st.st_size > 4096;
	}
	ok(files == STRIPES - 1, "gpu.data.1 to .%d hold chunks", STRIPES - 1);
	phosimg *img;
	int same = phosimg_open(path, &img) == 0;
	for (int o = 0; same && o < NOBJ; o++)
		same = reads_back(img, (uint32_t)o, data[o], sizes[o]);
	ok(same && phosimg_verify(img) == 0, "every object reads back byte for byte, and the image verifies");
	if (same)
		phosimg_close(img);

	copy_tree(path, bad);
	snprintf(f, sizeof(f), "%s/gpu.data.3", bad);
	unlink(f);
	ok(refused(bad, "gpu.data.3"), "a missing data file is named");
	copy_tree(path, bad);
	snprintf(f, sizeof(f), "%s/gpu.data.2", bad);
	if (truncate(f, 8192) != 0)
		bail("truncate");
	ok(refused(bad, "gpu.data.2"), "a data file cut short is named");
	copy_tree(path, bad);
	snprintf(f, sizeof(f), "%s/gpu.data.1", bad);
	int fd = open(f, O_RDWR);
	uint8_t b = 0;
	if (fd < 0 || pread(fd, &b, 1, 4096 + 100) != 1)
		bail("read");
	b ^= 0x5a;
	if (pwrite(fd, &b, 1, 4096 + 100) != 1)
		bail("write");
	close(fd);
	ok(refused(bad, "gpu.data.1"), "a damaged chunk in a data file is found by verify, and the file named");

	/* Symbolic links in place of its files, to good copies of them: an
	 * image holds none, and the check follows none. */
	copy_tree(path, bad);
	char keep[PATH_MAX + 32];
	snprintf(f, sizeof(f), "%s/gpu.data.2", bad);
	snprintf(keep, sizeof(keep), "%s.elsewhere", bad);
	char mv[6 * PATH_MAX];
	snprintf(mv, sizeof(mv), "mv '%s' '%s' && ln -s '%s' '%s'", f, keep, keep, f);
	if (system(mv) != 0)
		bail("ln");
	int linked = refused(bad, "symbolic link");
	copy_tree(path, bad);
	snprintf(f, sizeof(f), "%s/manifest.phos", bad);
	snprintf(mv, sizeof(mv), "mv '%s' '%s' && ln -s '%s' '%s'", f, keep, keep, f);
	if (system(mv) != 0)
		bail("ln");
	ok(linked && refused(bad, "symbolic link"), "a data file or the manifest that is a symbolic link is refused");
	unlink(keep);

	rm_rf(dir);
	free(dir);
	for (int o = 0; o < NOBJ; o++)
		free(data[o]);
	return done();
}
