/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * FORMAT.md suffices: tests/spec_reader.py, a reader written from the
 * specification alone, verifies images that libphosimg wrote (raw, lz4,
 * incremental, with CRIU files), reads the same bytes and the same
 * stats (1.6), and rejects corrupted ones, a stat's bad name among them.
 */
#include <xxhash.h>

#include "imgtest.h"

#define CHUNK (16u << 10)

static const char *reader(void)
{
	static char path[PATH_MAX];
	const char *src = getenv("PHOS_SRCDIR");
	snprintf(path, sizeof(path), "%s/tests/spec_reader.py", src ? src : ".");
	return path;
}

static int run_reader(const char *a1, const char *a2, const char *a3, const char *a4)
{
	pid_t pid = fork();
	if (pid == 0) {
		int nul = open("/dev/null", O_WRONLY);
		dup2(nul, 1);
		dup2(nul, 2);
		execl("/usr/bin/python3", "python3", reader(), a1, a2, a3, a4, (char *)NULL);
		_exit(127);
	}
	int st;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void make(const char *path, const char *parent, uint8_t **data, const uint64_t *sizes, int n)
{
	phosimg_writer *w;
	/* The child is split over three data files (1.3), the parent not. */
	phosimg_writer_opts o = { .chunk_size = CHUNK, .lz4 = true, .parent = parent, .stripes = parent ? 3 : 1 };
	if (phosimg_writer_create(path, &o, &w))
		bail("create: %s", phosimg_last_error());
	/* A tree of two processes: the last object is the child's. */
	phosimg_member m[2] = { { .pid = 100, .ppid = 1, .flags = PHOSIMG_MEMBER_CUDA | PHOSIMG_MEMBER_TRACED, .comm = "parent" },
				{ .pid = 101, .ppid = 100, .flags = PHOSIMG_MEMBER_TRACED, .comm = "child" } };
	phosimg_meta meta = { .pid = 100, .protocol = PHOSIMG_PROTO_STOP, .members = m, .member_count = 2 };
	if (phosimg_writer_set_meta(w, &meta))
		bail("set_meta");
	for (int i = 0; i < n; i++) {
		phosimg_object ob = { .va = 0x10000000ull * (uint64_t)(i + 1), .size = sizes[i], .flags = 1,
				      .pid = i == n - 1 ? 101 : 100 };
		uint32_t id;
		if (phosimg_writer_add_object(w, &ob, &id) || put_object(w, id, data[i], sizes[i], CHUNK, NULL))
			bail("write: %s", phosimg_last_error());
	}
	/* Named values, set out of order; one set twice keeps the last. */
	static const char *const names[] = { "stall_ns", "step_ns.driver-checkpoint", "cow_shadows", "step_ns.park",
					     "z9._-" };
	for (int i = 0; i < 5; i++)
		if (phosimg_writer_set_stat(w, names[i], (uint64_t)(i + 1) << (10 * i)))
			bail("set_stat %s", names[i]);
	if (phosimg_writer_set_stat(w, "stall_ns", parent ? 512345678 : 1))
		bail("set_stat stall_ns again");
	char f[PATH_MAX];
	snprintf(f, sizeof(f), "%s/core-1.img", phosimg_writer_criu_dir(w));
	write_file(f, data[0], 1000);
	if (phosimg_writer_finish(w))
		bail("finish: %s", phosimg_last_error());
}

/* Whether the reader's stats of image (a "NAME VALUE" line each, in out)
 * are the library's, in the same order. */
static int same_stats(const char *image, const char *out)
{
	phosimg *img;
	if (run_reader("stats", image, out, NULL) != 0 || phosimg_open(image, &img))
		return 0;
	const phosimg_info *in = phosimg_get_info(img);
	FILE *f = fopen(out, "r");
	char name[128];
	unsigned long long v;
	uint32_t n = 0;
	int same = f != NULL && in->stat_count == 5;
	while (same && fscanf(f, "%127s %llu", name, &v) == 2) {
		same = n < in->stat_count && !strcmp(name, in->stats[n].name) && v == in->stats[n].value;
		n++;
	}
	same = same && n == in->stat_count;
	if (f)
		fclose(f);
	phosimg_close(img);
	return same;
}

/* patch_manifest's fix: names[0] (a stat's name) replaced by names[1],
 * of the same length. */
static void replace_name(uint8_t *m, size_t n, void *arg)
{
	const char *const *names = arg;
	uint8_t *at = memmem(m, n, names[0], strlen(names[0]));
	if (!at)
		bail("no stat %s in the manifest", names[0]);
	memcpy(at, names[1], strlen(names[1]));
}

/* Rewrites the manifest of image with `from` (a stat's name) replaced by
 * `to`, of the same length, and its checksum made good again. */
static void rename_stat(const char *image, const char *from, const char *to)
{
	const char *names[] = { from, to };
	patch_manifest(image, replace_name, names);
}

int main(void)
{
	if (access("/usr/bin/python3", X_OK) != 0 ||
	    system("/usr/bin/python3 -c 'import xxhash, lz4.block' 2>/dev/null") != 0)
		skip_all("needs /usr/bin/python3 with xxhash and lz4 (make deps)");
	if (access(reader(), R_OK) != 0)
		skip_all("cannot find tests/spec_reader.py (set PHOS_SRCDIR)");
	plan(6);
	char *dir = scratch_dir("spec");
	uint64_t sizes[3] = { 9 * CHUNK + 5, 2 * CHUNK, 100 };
	uint8_t *data[3];
	for (int i = 0; i < 3; i++) {
		data[i] = malloc(sizes[i]);
		fill(data[i], sizes[i], (uint64_t)i + 7, i == 0);
	}
	char a[PATH_MAX], b[PATH_MAX], out[PATH_MAX];
	snprintf(a, sizeof(a), "%s/a", dir);
	snprintf(b, sizeof(b), "%s/b", dir);
	snprintf(out, sizeof(out), "%s/out", dir);
	make(a, NULL, data, sizes, 3);
	fill(data[0] + 4 * CHUNK, CHUNK, 1234, 0);
	make(b, "a", data, sizes, 3);

	ok(run_reader("verify", a, NULL, NULL) == 0 && run_reader("verify", b, NULL, NULL) == 0,
	   "the independent reader finds a full and an incremental image of a process tree sound");
	int same = 1;
	for (int i = 0; i < 3 && same; i++) {
		char obj[8];
		snprintf(obj, sizeof(obj), "%d", i);
		same = run_reader("cat", b, obj, out) == 0;
		FILE *f = fopen(out, "rb");
		uint8_t *got = malloc(sizes[i] + 1);
		same = same && f && fread(got, 1, sizes[i] + 1, f) == sizes[i] && !memcmp(got, data[i], sizes[i]);
		if (f)
			fclose(f);
		free(got);
	}
	ok(same, "it reads the same bytes through the parent chain");

	/* One flipped bit in each file in turn. */
	const char *files[] = { "manifest.phos", "gpu.index", "gpu.data", "criu/core-1.img" };
	int rejected = 0;
	for (int i = 0; i < 4; i++) {
		char p[PATH_MAX + 32];
		snprintf(p, sizeof(p), "%s/%s", b, files[i]);
		FILE *f = fopen(p, "r+b");
		fseek(f, 0, SEEK_END);
		long n = ftell(f);
		long at = n / 2 + i;
		fseek(f, at, SEEK_SET);
		int c = fgetc(f);
		fseek(f, at, SEEK_SET);
		fputc(c ^ 0x10, f);
		fclose(f);
		rejected += run_reader("verify", b, NULL, NULL) == 1;
		f = fopen(p, "r+b");
		fseek(f, at, SEEK_SET);
		fputc(c, f);
		fclose(f);
	}
	ok(rejected == 4, "it rejects a flipped bit in each of the image's files (%d of 4)", rejected);
	ok(run_reader("verify", b, NULL, NULL) == 0, "and accepts the image again once repaired");

	uint64_t stall = 0;
	phosimg *img;
	int lib = phosimg_open(b, &img) == 0 && phosimg_stat_get(phosimg_get_info(img), "stall_ns", &stall) == 0;
	if (lib)
		phosimg_close(img);
	ok(lib && stall == 512345678 && same_stats(a, out) && same_stats(b, out),
	   "it reads the STATS section as the library does: the same names, values and order");

	/* A name with a byte the spec forbids ('A'), the checksum made good:
	 * both readers refuse the manifest. */
	rename_stat(b, "cow_shadows", "cow_Shadows");
	int lib_refuses = phosimg_open(b, &img) == -EBADMSG && strstr(phosimg_last_error(), "bad name");
	int spec_refuses = run_reader("verify", b, NULL, NULL) == 1;
	rename_stat(b, "cow_Shadows", "cow_shadows");
	ok(lib_refuses && spec_refuses && run_reader("verify", b, NULL, NULL) == 0,
	   "a stat's name with a forbidden byte is refused by both readers (library %d, reader %d)", lib_refuses,
	   spec_refuses);
	for (int i = 0; i < 3; i++)
		free(data[i]);
	rm_rf(dir);
	free(dir);
	return done();
}
