/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Format 1.5: memory one member imported of another's (or of its own) is
 * stored once, as the owner's object, and the import is a share: the
 * member, its tracer's key, the object.
 *   - an image with shares reads them back, and `phos-image info` shows
 *     them;
 *   - the writer refuses a share of a pid that is no member, of an
 *     object not in the image, or a key the member has already;
 *   - a reader rejects a manifest (checksum right) whose share names an
 *     object not in the image, or a pid that is no member: a restore
 *     would give the importer nothing.
 */
#include <string.h>

#include "format.h"
#include "imgtest.h"
#include "tap.h"

#define CHUNK (64u << 10)

static const phosimg_member tree[2] = {
	{ .pid = 5100, .ppid = 1, .flags = PHOSIMG_MEMBER_CUDA | PHOSIMG_MEMBER_TRACED, .comm = "rank0" },
	{ .pid = 5101, .ppid = 5100, .flags = PHOSIMG_MEMBER_CUDA | PHOSIMG_MEMBER_TRACED, .comm = "rank1" },
};

/* Writes a two-member image (one object each) with the shares sh (n);
 * refused: how many add_share refused. 0 when it was written. */
static int write_tree(const char *path, const phosimg_share *sh, int n, int *refused)
{
	phosimg_writer *w;
	phosimg_writer_opts o = { .chunk_size = CHUNK };
	if (phosimg_writer_create(path, &o, &w))
		return -1;
	phosimg_meta meta = { .pid = tree[0].pid, .protocol = PHOSIMG_PROTO_COW, .members = tree, .member_count = 2 };
	static uint8_t data[CHUNK];
	fill(data, sizeof(data), 5, 0);
	int e = phosimg_writer_set_meta(w, &meta);
	for (int m = 0; m < 2 && !e; m++) {
		phosimg_object ob = { .va = 0x7f0000000000ull + (uint64_t)m * CHUNK, .size = CHUNK, .flags = 1, .key = 3,
				      .pid = tree[m].pid };
		uint32_t id;
		e = phosimg_writer_add_object(w, &ob, &id);
		if (!e)
			e = put_object(w, id, data, CHUNK, CHUNK, NULL);
	}
	*refused = 0;
	for (int i = 0; i < n && !e; i++)
		*refused += phosimg_writer_add_share(w, &sh[i]) != 0;
	return e ? (phosimg_writer_finish(w), -1) : phosimg_writer_finish(w);
}

/* Reads path's manifest into a malloc'd buffer (*len bytes). */
static uint8_t *slurp(const char *path, size_t *len)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", path, PHOSIMG_MANIFEST_FILE);
	FILE *f = fopen(p, "rb");
	uint8_t *b = malloc(1 << 20);
	*len = f && b ? fread(b, 1, 1 << 20, f) : 0;
	if (f)
		fclose(f);
	return b;
}

/* Sets field `at` (bytes into the first share record) of the SHARES
 * section of path's manifest to v, with the checksum made right; 0 when
 * done. */
static int patch_share(const char *path, size_t at, uint32_t v)
{
	size_t len;
	uint8_t *b = slurp(path, &len);
	int done = -1;
	for (size_t o = MANIFEST_HEADER_SIZE; b && o + SECTION_HEADER_SIZE <= len - MANIFEST_TRAILER_SIZE;) {
		uint32_t type = get32(b + o);
		uint64_t slen = get64(b + o + 8);
		if (type == SEC_SHARES) {
			put32(b + o + SECTION_HEADER_SIZE + 8 + at, v);
			fmt_hash(b, len - 16, b + len - 16);
			char p[PATH_MAX];
			snprintf(p, sizeof(p), "%s/%s", path, PHOSIMG_MANIFEST_FILE);
			done = write_file(p, b, len);
			break;
		}
		o = (o + SECTION_HEADER_SIZE + slen + 7) / 8 * 8;
	}
	free(b);
	return done;
}

int main(void)
{
	plan(6);
	char *dir = scratch_dir("shares");
	char path[PATH_MAX], out[PATH_MAX];
	snprintf(out, sizeof(out), "%s/info", dir);

	/* rank 1 imports rank 0's object (0) and its own (1). */
	const phosimg_share good[2] = { { 5101, 7, 0 }, { 5101, 8, 1 } };
	snprintf(path, sizeof(path), "%s/good", dir);
	int refused = -1;
	phosimg *img = NULL;
	const phosimg_info *in = write_tree(path, good, 2, &refused) == 0 && !phosimg_open(path, &img)
					 ? phosimg_get_info(img)
					 : NULL;
	ok(in && !refused && in->share_count == 2 && in->shares[0].pid == 5101 && in->shares[0].key == 7 &&
		   in->shares[0].object == 0 && in->shares[1].object == 1 && in->version_minor >= 5,
	   "an image with shares reads them back (format 1.%u)", in ? in->version_minor : 0);
	phosimg_close(img);
	ok(run_tool(out, "info", path, NULL) == 0 && file_contains(out, "share: member 5101 maps object 0 (its key 7)"),
	   "phos-image info shows each share");

	const phosimg_share bad[3] = { { 4242, 1, 0 }, { 5101, 1, 2 }, { 5101, 7, 1 } };
	snprintf(path, sizeof(path), "%s/refused", dir);
	phosimg_share with_dup[4] = { good[0], bad[0], bad[1], bad[2] };
	int written = write_tree(path, with_dup, 4, &refused) == 0;
	ok(written && refused == 3,
	   "the writer refuses a share of no member, of no object, and a key the member has already (%d of 3)", refused);

	snprintf(path, sizeof(path), "%s/noobject", dir);
	written = write_tree(path, good, 1, &refused) == 0 && patch_share(path, 8, 9) == 0;
	ok(written && phosimg_open(path, &img) != 0 && strstr(phosimg_last_error(), "not in the image"),
	   "a reader rejects a share of an object the image lacks (%s)", phosimg_last_error());
	snprintf(path, sizeof(path), "%s/nomember", dir);
	written = write_tree(path, good, 1, &refused) == 0 && patch_share(path, 0, 4242) == 0;
	ok(written && phosimg_open(path, &img) != 0 && strstr(phosimg_last_error(), "no member"),
	   "a reader rejects a share of a pid that is no member (%s)", phosimg_last_error());
	snprintf(path, sizeof(path), "%s/unpatched", dir);
	written = write_tree(path, good, 1, &refused) == 0 && patch_share(path, 8, 0) == 0;
	ok(written && phosimg_open(path, &img) == 0, "the same rewrite with a good share opens (the checksum is right)");
	phosimg_close(img);
	rm_rf(dir);
	free(dir);
	return done();
}
