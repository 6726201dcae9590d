/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A chain of three images: a full base and two incrementals that refer to
 * their parent for unchanged chunks (given explicitly, or found equal).
 * The newest reads back the newest state through the chain; diff names the
 * changed chunks; the chain survives being copied elsewhere; a missing or
 * replaced parent is reported, and verify fails.
 */
#include "imgtest.h"

#define CHUNK (64u << 10)
#define NCHUNK 16
#define SIZE (NCHUNK * CHUNK)

static void write_image(const char *path, const char *parent, const uint8_t *a, const uint8_t *b,
			const int *unchanged_a)
{
	phosimg_writer *w;
	phosimg_writer_opts o = { .chunk_size = CHUNK, .parent = parent, .lz4 = true };
	phosimg_object oa = { .va = 0x10000000, .size = SIZE }, ob = { .va = 0x20000000, .size = SIZE / 2 + 5 };
	uint32_t ia, ib;
	if (phosimg_writer_create(path, &o, &w) || phosimg_writer_add_object(w, &oa, &ia) ||
	    phosimg_writer_add_object(w, &ob, &ib))
		bail("create %s: %s", path, phosimg_last_error());
	for (int c = 0; c < NCHUNK; c++) {
		int e = unchanged_a && unchanged_a[c] ? phosimg_writer_put_unchanged(w, ia, (uint64_t)c * CHUNK)
						      : phosimg_writer_put(w, ia, (uint64_t)c * CHUNK, a + c * CHUNK, CHUNK);
		if (e)
			bail("put %s chunk %d: %d %s", path, c, e, phosimg_last_error());
	}
	if (put_object(w, ib, b, SIZE / 2 + 5, CHUNK, NULL) || phosimg_writer_finish(w))
		bail("finish %s: %s", path, phosimg_last_error());
}

int main(void)
{
	plan(14);
	char *dir = scratch_dir("chain");
	char base[PATH_MAX], inc1[PATH_MAX], inc2[PATH_MAX], out[PATH_MAX];
	snprintf(base, sizeof(base), "%s/1", dir);
	snprintf(inc1, sizeof(inc1), "%s/2", dir);
	snprintf(inc2, sizeof(inc2), "%s/3", dir);
	snprintf(out, sizeof(out), "%s/diff.txt", dir);

	uint8_t *a = malloc(SIZE), *b = malloc(SIZE);
	fill(a, SIZE, 1, 0);
	fill(b, SIZE, 2, 0);
	write_image(base, NULL, a, b, NULL);

	/* 2: chunks 3 and 9 of A change; the rest is declared unchanged. */
	int unchanged[NCHUNK];
	for (int c = 0; c < NCHUNK; c++)
		unchanged[c] = c != 3 && c != 9;
	fill(a + 3 * CHUNK, CHUNK, 33, 0);
	fill(a + 9 * CHUNK, CHUNK, 99, 0);
	write_image(inc1, "1", a, b, unchanged);

	/* 3: chunk 9 of A changes again and chunk 0 of B; every chunk is
	 * given, and the writer finds the unchanged ones equal. */
	fill(a + 9 * CHUNK, CHUNK, 999, 0);
	fill(b, CHUNK, 777, 0);
	write_image(inc2, "2", a, b, NULL);

	phosimg *img;
	int e = phosimg_open(inc2, &img);
	ok(e == 0, "the newest of three chained images opens (%s)", phosimg_last_error());
	if (e)
		bail("cannot go on");
	const phosimg_info *in = phosimg_get_info(img);
	ok(in->depth == 3 && in->has_parent && !strcmp(in->parent_path, "2"), "it knows its chain of %u images",
	   in->depth);
	ok(in->parent_chunks == in->chunk_count - 2 && in->stored_bytes < 2 * CHUNK + 1,
	   "only its 2 changed chunks are stored (%llu of %llu refer to the parent)",
	   (unsigned long long)in->parent_chunks, (unsigned long long)in->chunk_count);
	ok(reads_back(img, 0, a, SIZE) && reads_back(img, 1, b, SIZE / 2 + 5),
	   "it reads back the newest state through its parents");
	ok(phosimg_verify(img) == 0, "the whole chain verifies");
	phosimg_close(img);

	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof(cwd)) || chdir(inc2) != 0)
		bail("chdir");
	e = phosimg_open(".", &img);
	ok(e == 0 && phosimg_get_info(img)->depth == 3, "opened as \".\" from inside, it still finds its parents");
	if (!e)
		phosimg_close(img);
	if (chdir(cwd) != 0)
		bail("chdir back");

	ok(run_tool(out, "diff", base, inc2) == 1 && file_contains(out, "object 0 (va 0x10000000): 2 of 16 chunks differ: 3, 9") &&
		   file_contains(out, "object 1 (va 0x20000000): 1 of 9 chunks differ: 0"),
	   "phos-image diff names the chunks that changed since the base");
	ok(run_tool(out, "diff", inc2, inc2) == 0, "an image does not differ from itself");

	char moved[PATH_MAX], cmd[6 * PATH_MAX];
	phosimg_writer *w4;
	phosimg_writer_opts o4 = { .chunk_size = CHUNK * 2, .parent = "2" };
	snprintf(cmd, sizeof(cmd), "%s/4", dir);
	ok(phosimg_writer_create(cmd, &o4, &w4) == -EINVAL, "an incremental image must keep its parent's chunk size");

	/* cp -r of the whole chain elsewhere: parents are found relatively. */
	snprintf(moved, sizeof(moved), "%s/copy", dir);
	snprintf(cmd, sizeof(cmd), "mkdir %s && cp -r %s %s %s %s/", moved, base, inc1, inc2, moved);
	if (system(cmd) != 0)
		bail("cp");
	snprintf(cmd, sizeof(cmd), "%s/3", moved);
	ok(run_tool(NULL, "verify", cmd, NULL) == 0, "a copied chain verifies in its new place");

	/* The base removed: the chain is broken and says where. */
	snprintf(cmd, sizeof(cmd), "rm -r %s", base);
	if (system(cmd) != 0)
		bail("rm");
	e = phosimg_open(inc2, &img);
	ok(e == -ENOENT && strstr(phosimg_last_error(), "parent image") && strstr(phosimg_last_error(), "/1"),
	   "without its base, the chain is reported broken (%s)", phosimg_last_error());
	ok(run_tool(out, "verify", inc2, NULL) == 1 && file_contains(out, "parent image"),
	   "and phos-image verify exits 1 naming the missing parent");

	/* A different image put in the base's place is refused. */
	write_image(base, NULL, b, a, NULL);
	e = phosimg_open(inc2, &img);
	ok(e == -EBADMSG && strstr(phosimg_last_error(), "another image"),
	   "an impostor parent is refused (%s)", phosimg_last_error());

	phosimg_writer *w;
	phosimg_writer_opts o = { .chunk_size = CHUNK };
	snprintf(cmd, sizeof(cmd), "%s/4", dir);
	phosimg_object ob = { .va = 0x999000, .size = CHUNK };
	uint32_t id;
	e = phosimg_writer_create(cmd, &o, &w);
	e = e ? e : phosimg_writer_add_object(w, &ob, &id);
	ok(e == 0 && phosimg_writer_put_unchanged(w, id, 0) == -ENOENT, "without a parent, nothing is unchanged");
	phosimg_writer_abort(w);

	free(a);
	free(b);
	rm_rf(dir);
	free(dir);
	return done();
}
