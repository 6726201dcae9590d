/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * An image written with or without lz4 reads back byte for byte, keeps its
 * manifest (process, devices, protocol, times, objects, CRIU files), and
 * verifies; compressible chunks shrink with lz4. The writer refuses bad
 * chunks and never publishes an incomplete image.
 */
#include "imgtest.h"

#define CHUNK (1u << 20)

static const uint64_t sizes[] = { 10 * CHUNK + 123, 4 * CHUNK, 1, 3 * CHUNK / 2 };
#define NOBJ (sizeof(sizes) / sizeof(sizes[0]))

static void roundtrip(const char *dir, const char *where, int lz4)
{
	char path[PATH_MAX], msg[128];
	snprintf(path, sizeof(path), "%s/img-%s", dir, lz4 ? "lz4" : "raw");
	snprintf(msg, sizeof(msg), "%s, %s", where, lz4 ? "with lz4" : "without lz4");
	uint8_t *data[NOBJ];
	for (size_t i = 0; i < NOBJ; i++) {
		data[i] = malloc(sizes[i]);
		fill(data[i], sizes[i], i + 1, i % 2 == 0);
	}
	phosimg_writer *w;
	phosimg_writer_opts o = { .chunk_size = CHUNK, .lz4 = lz4 };
	if (phosimg_writer_create(path, &o, &w))
		bail("create: %s", phosimg_last_error());
	static const char argv[] = "python3\0train.py\0--epochs\0003\0";
	phosimg_device dev = { .ordinal = 0, .cc_major = 9, .cc_minor = 0, .total_mem = 150754820096ull,
			       .uuid = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 } };
	strcpy(dev.name, "NVIDIA H200");
	phosimg_meta meta = { .pid = 4242, .uid = 1000, .gid = 100, .cmdline = argv, .cmdline_len = sizeof(argv) - 1,
			      .protocol = PHOSIMG_PROTO_COW, .t1_ns = 1700000000123456789ull, .t2_ns = 0,
			      .devices = &dev, .device_count = 1 };
	ok(phosimg_writer_set_meta(w, &meta) == 0, "%s: metadata is accepted", msg);
	uint32_t id[NOBJ];
	for (size_t i = 0; i < NOBJ; i++) {
		phosimg_object ob = { .device = 0, .va = 0x7f0000000000ull + i * (64ull << 20), .size = sizes[i],
				      .flags = (uint32_t)i & PHOSIMG_OBJ_APP_VMM };
		if (phosimg_writer_add_object(w, &ob, &id[i]) || id[i] != i)
			bail("add_object");
	}
	/* Chunks in a shuffled order. */
	unsigned seed = 7;
	int put_ok = 1;
	for (size_t i = 0; i < NOBJ; i++) {
		uint64_t n = sizes[i] / CHUNK + (sizes[i] % CHUNK != 0), *perm = malloc(n * sizeof(*perm));
		shuffle(perm, n, &seed);
		put_ok &= put_object(w, id[i], data[i], sizes[i], CHUNK, perm) == 0;
		free(perm);
	}
	ok(put_ok, "%s: chunks are stored in any order", msg);
	ok(phosimg_writer_put(w, 0, 0, data[0], CHUNK) == -EEXIST, "%s: a chunk stored twice is refused", msg);
	ok(phosimg_writer_put(w, 0, 10 * CHUNK, data[0], CHUNK) == -EINVAL &&
		   phosimg_writer_put(w, 0, 7, data[0], CHUNK) == -EINVAL && phosimg_writer_put(w, 9, 0, data[0], 1) == -EINVAL,
	   "%s: a chunk of the wrong length, offset or object is refused", msg);
	char criu[PATH_MAX];
	snprintf(criu, sizeof(criu), "%s/core-4242.img", phosimg_writer_criu_dir(w));
	write_file(criu, "core image bytes", 16);
	snprintf(criu, sizeof(criu), "%s/pages-1.img", phosimg_writer_criu_dir(w));
	write_file(criu, data[1], 65536);
	struct stat st;
	ok(stat(path, &st) != 0, "%s: nothing is at the path before finish", msg);
	ok(phosimg_writer_finish(w) == 0, "%s: the image is published", msg);

	phosimg *img;
	int e = phosimg_open(path, &img);
	if (e)
		bail("open: %s", phosimg_last_error());
	const phosimg_info *in = phosimg_get_info(img);
	ok(in->meta.pid == 4242 && in->meta.uid == 1000 && in->meta.cmdline_len == sizeof(argv) - 1 &&
		   !memcmp(in->meta.cmdline, argv, sizeof(argv) - 1) && in->meta.protocol == PHOSIMG_PROTO_COW &&
		   in->meta.t1_ns == meta.t1_ns && in->meta.device_count == 1 &&
		   !strcmp(in->meta.devices[0].name, "NVIDIA H200") && in->meta.devices[0].uuid[15] == 16 &&
		   in->chunk_size == CHUNK && !in->has_parent && in->depth == 1,
	   "%s: the manifest reads back", msg);
	int objs_ok = in->object_count == NOBJ;
	for (size_t i = 0; objs_ok && i < NOBJ; i++)
		objs_ok = in->objects[i].size == sizes[i] && in->objects[i].va == 0x7f0000000000ull + i * (64ull << 20) &&
			  in->objects[i].flags == ((uint32_t)i & PHOSIMG_OBJ_APP_VMM);
	ok(objs_ok, "%s: the object table reads back", msg);
	int same = 1;
	for (size_t i = 0; i < NOBJ; i++)
		same &= reads_back(img, (uint32_t)i, data[i], sizes[i]);
	ok(same, "%s: every object reads back byte for byte", msg);
	ok(in->criu_file_count == 2 && !strcmp(in->criu_files[0].name, "core-4242.img") &&
		   in->criu_files[1].size == 65536,
	   "%s: the CRIU files are listed", msg);
	if (lz4)
		ok(in->stored_bytes < in->raw_bytes * 3 / 4, "%s: compressible chunks shrink (%llu of %llu bytes)",
		   msg, (unsigned long long)in->stored_bytes, (unsigned long long)in->raw_bytes);
	else
		ok(in->stored_bytes == in->raw_bytes, "%s: chunks are stored whole", msg);
	ok(phosimg_verify(img) == 0, "%s: the image verifies", msg);
	phosimg_close(img);
	ok(run_tool(NULL, "verify", path, NULL) == 0, "%s: phos-image verify exits 0", msg);
	for (size_t i = 0; i < NOBJ; i++)
		free(data[i]);
}

int main(void)
{
	plan(56);
	/* A disk file system (O_DIRECT) and tmpfs (buffered writes). */
	char *shm = NULL;
	struct stat sst;
	if (stat("/dev/shm", &sst) == 0 && S_ISDIR(sst.st_mode)) {
		char *saved = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
		setenv("TMPDIR", "/dev/shm", 1);
		shm = scratch_dir("roundtrip");
		if (saved) {
			setenv("TMPDIR", saved, 1);
			free(saved);
		} else {
			unsetenv("TMPDIR");
		}
	}
	char *dir = scratch_dir("roundtrip");
	for (int lz4 = 0; lz4 < 2; lz4++) {
		roundtrip(dir, "TMPDIR", lz4);
		if (shm) {
			roundtrip(shm, "/dev/shm", lz4);
		} else {
			for (int i = 0; i < 13; i++)
				skip("no /dev/shm");
		}
	}
	if (shm) {
		rm_rf(shm);
		free(shm);
	}

	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/img-raw", dir);
	phosimg_writer *w;
	ok(phosimg_writer_create(path, NULL, &w) == -EEXIST, "a writer will not replace an existing image");

	/* Incomplete: one chunk missing. */
	snprintf(path, sizeof(path), "%s/incomplete", dir);
	phosimg_writer_opts o = { .chunk_size = 64 << 10 };
	uint8_t buf[64 << 10] = { 0 };
	uint32_t id;
	phosimg_object ob = { .va = 0x1000, .size = 3 * sizeof(buf) };
	int e = phosimg_writer_create(path, &o, &w);
	e = e ? e : phosimg_writer_add_object(w, &ob, &id);
	e = e ? e : phosimg_writer_put(w, id, 0, buf, sizeof(buf));
	e = e ? e : phosimg_writer_put(w, id, 2 * sizeof(buf), buf, sizeof(buf));
	if (e)
		bail("incomplete image setup: %d", e);
	struct stat st;
	ok(phosimg_writer_finish(w) == -ENODATA && stat(path, &st) != 0 && strstr(phosimg_last_error(), "chunk 1"),
	   "an image with a missing chunk is not published (%s)", phosimg_last_error());

	/* Nothing of the failed writer is left behind. */
	char cmd[PATH_MAX + 64];
	snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s | grep -v '^img-')\"", dir);
	ok(system(cmd) == 0, "and its temporary directory is gone");

	snprintf(path, sizeof(path), "%s/nosuchdir/img", dir);
	ok(phosimg_writer_create(path, NULL, &w) == -ENOENT, "a writer into a missing directory fails with ENOENT");
	rm_rf(dir);
	free(dir);
	return done();
}
