/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A store that fills up: the writer fails with ENOSPC and a message, the
 * image is not published, its temporary files are removed, and an image
 * already in the store stays sound. Needs root to mount a small tmpfs.
 */
#include <dirent.h>
#include <sys/mount.h>

#include "imgtest.h"

#define CHUNK (256u << 10)

static int write_image(const char *path, const uint8_t *data, uint64_t size, int *put_err)
{
	phosimg_writer *w;
	phosimg_writer_opts o = { .chunk_size = CHUNK };
	phosimg_object ob = { .va = 0x600000000ull, .size = size };
	uint32_t id;
	int e = phosimg_writer_create(path, &o, &w);
	if (e)
		return e;
	if ((e = phosimg_writer_add_object(w, &ob, &id)))
		return e;
	*put_err = put_object(w, id, data, size, CHUNK, NULL);
	return phosimg_writer_finish(w); /* refuses after a failed put */
}

static int entries(const char *dir)
{
	int n = 0;
	DIR *d = opendir(dir);
	for (struct dirent *de; d && (de = readdir(d));)
		n += de->d_name[0] != '.' || strstr(de->d_name, ".tmp-");
	if (d)
		closedir(d);
	return n;
}

int main(void)
{
	if (geteuid() != 0)
		skip_all("needs root to mount a small tmpfs");
	char *dir = scratch_dir("full");
	if (mount("phos-test", dir, "tmpfs", 0, "size=8m") != 0) {
		rm_rf(dir);
		skip_all("cannot mount a tmpfs here");
	}
	plan(5);
	uint8_t *data = malloc(32u << 20);
	fill(data, 32u << 20, 3, 0);
	char old[PATH_MAX], big[PATH_MAX];
	snprintf(old, sizeof(old), "%s/old", dir);
	snprintf(big, sizeof(big), "%s/big", dir);
	int put_err = 0;
	ok(write_image(old, data, 2u << 20, &put_err) == 0 && put_err == 0, "a small image fits in the store");

	int e = write_image(big, data, 32u << 20, &put_err);
	ok(put_err == -ENOSPC && strstr(phosimg_last_error(), "No space left"),
	   "storing chunks into a full store fails with ENOSPC (%s)", phosimg_last_error());
	struct stat st;
	ok(e == -ENOSPC && stat(big, &st) != 0, "the image is not published");
	ok(entries(dir) == 1, "its temporary files are gone");
	phosimg *img;
	e = phosimg_open(old, &img);
	ok(e == 0 && phosimg_verify(img) == 0 && reads_back(img, 0, data, 2u << 20),
	   "the image already in the store is intact");
	if (!e)
		phosimg_close(img);
	free(data);
	umount2(dir, MNT_DETACH);
	rm_rf(dir);
	free(dir);
	return done();
}
