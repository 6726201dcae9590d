/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A writer process killed with SIGKILL at any moment leaves either no image
 * at its path or a complete one that verifies; an older image beside it
 * stays sound; and the next writer of the same path clears what the dead
 * one left and succeeds.
 */
#include <dirent.h>
#include <signal.h>
#include <time.h>

#include "imgtest.h"

#define CHUNK (64u << 10)
#define SIZE (24u << 20)
#define ROUNDS 24

static int write_image(const char *path, const uint8_t *data, uint32_t size)
{
	phosimg_writer *w;
	phosimg_writer_opts o = { .chunk_size = CHUNK };
	phosimg_object ob = { .va = 0x40000000, .size = size };
	uint32_t id;
	if (phosimg_writer_create(path, &o, &w) || phosimg_writer_add_object(w, &ob, &id))
		return 1;
	/* Something for CRIU's part of the image too. */
	char f[PATH_MAX];
	snprintf(f, sizeof(f), "%s/pages-1.img", phosimg_writer_criu_dir(w));
	write_file(f, data, 1u << 20);
	if (put_object(w, id, data, size, CHUNK, NULL))
		return 1;
	return phosimg_writer_finish(w) != 0;
}

static int leftovers(const char *dir)
{
	int n = 0;
	DIR *d = opendir(dir);
	for (struct dirent *de; d && (de = readdir(d));)
		n += strstr(de->d_name, ".tmp-") != NULL;
	if (d)
		closedir(d);
	return n;
}

int main(void)
{
	plan(5);
	char *dir = scratch_dir("kill");
	uint8_t *data = malloc(SIZE);
	fill(data, SIZE, 5, 0);
	char old[PATH_MAX], path[PATH_MAX];
	snprintf(old, sizeof(old), "%s/old", dir);
	snprintf(path, sizeof(path), "%s/new", dir);
	if (write_image(old, data, SIZE / 4))
		bail("old image: %s", phosimg_last_error());

	/* How long a whole write takes, to spread the kills over it. */
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	char probe[PATH_MAX];
	snprintf(probe, sizeof(probe), "%s/probe", dir);
	if (write_image(probe, data, SIZE))
		bail("probe image: %s", phosimg_last_error());
	clock_gettime(CLOCK_MONOTONIC, &t1);
	long total_us = (t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000;
	rm_rf(probe);

	int absent = 0, complete = 0, broken = 0;
	for (int r = 0; r < ROUNDS; r++) {
		pid_t pid = fork();
		if (pid == 0)
			_exit(write_image(path, data, SIZE));
		int st;
		if (r < ROUNDS - 2) {
			/* From the very start to well past a whole write. */
			usleep((useconds_t)(2 * total_us * r / (ROUNDS - 2)));
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
		} else {
			/* The last ones may finish. */
			waitpid(pid, &st, 0);
		}
		phosimg *img;
		struct stat sb;
		if (stat(path, &sb) != 0) {
			absent++;
		} else if (phosimg_open(path, &img) == 0) {
			if (phosimg_verify(img) == 0 && reads_back(img, 0, data, SIZE))
				complete++;
			else
				broken++;
			phosimg_close(img);
			rm_rf(path);
		} else {
			diag("half image: %s", phosimg_last_error());
			broken++;
			rm_rf(path);
		}
	}
	ok(broken == 0, "%d writers killed at moments across the write: %d left no image, %d a complete one, %d a broken one",
	   ROUNDS, absent, complete, broken);
	ok(absent > 0 && complete > 0, "kills before the publication left nothing; writers that finished left complete images");

	phosimg *img;
	int e = phosimg_open(old, &img);
	ok(e == 0 && phosimg_verify(img) == 0 && reads_back(img, 0, data, SIZE / 4),
	   "the older image beside them is intact");
	if (!e)
		phosimg_close(img);

	/* A killed writer leaves its temporary directory; the next one clears it. */
	pid_t pid = fork();
	if (pid == 0) {
		phosimg_writer *w;
		phosimg_writer_create(path, NULL, &w);
		kill(getpid(), SIGKILL);
	}
	waitpid(pid, NULL, 0);
	int before = leftovers(dir);
	ok(before >= 1 && write_image(path, data, SIZE / 8) == 0, "a new writer of the same path succeeds (%d left over)",
	   before);
	ok(leftovers(dir) == 0, "and the dead writers' temporary directories are gone");
	free(data);
	rm_rf(dir);
	free(dir);
	return done();
}
