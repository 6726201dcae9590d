/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * An image keeps the named values its writer set (format 1.6, the STATS
 * section): they read back by name, in ascending order, the last value
 * given to a name winning; a bad name, or one past the limit, is refused
 * and leaves nothing behind. An image without stats has no STATS section,
 * and a 1.5 image (none) still reads, as does one whose stats a reader
 * does not know (it skips the non-critical section). `phos-image info`
 * prints the stats, and `phos-image info --json` gives the manifest as
 * JSON that Python's json module parses, stats as an object of name to
 * value.
 */
#include <jansson.h>
#include <xxhash.h>

#include "imgtest.h"

#define CHUNK (64u << 10)

static const uint64_t size = 3 * CHUNK + 17;
static uint8_t *data;

/* Writes an image at path: one object, a CRIU file, and the stats that
 * set (NULL: none) gives it. */
static void make(const char *path, void (*set)(phosimg_writer *))
{
	phosimg_writer *w;
	phosimg_writer_opts o = { .chunk_size = CHUNK };
	if (phosimg_writer_create(path, &o, &w))
		bail("create %s: %s", path, phosimg_last_error());
	static const char argv[] = "python3\0train.py\0--lr\0" "0.1\0";
	phosimg_meta meta = { .pid = 4242, .uid = 1000, .gid = 100, .cmdline = argv, .cmdline_len = sizeof(argv) - 1,
			      .protocol = PHOSIMG_PROTO_COW, .t1_ns = 1700000000123456789ull };
	phosimg_object ob = { .va = 0x7f0000000000ull, .size = size };
	uint32_t id;
	if (phosimg_writer_set_meta(w, &meta) || phosimg_writer_add_object(w, &ob, &id) ||
	    put_object(w, id, data, size, CHUNK, NULL))
		bail("write %s: %s", path, phosimg_last_error());
	char f[PATH_MAX];
	snprintf(f, sizeof(f), "%s/core-4242.img", phosimg_writer_criu_dir(w));
	write_file(f, "core", 4);
	if (set)
		set(w);
	if (phosimg_writer_finish(w))
		bail("finish %s: %s", path, phosimg_last_error());
}

static int set_ok = 1;
static char longest[PHOSIMG_STAT_NAME_MAX + 1];

static void set_some(phosimg_writer *w)
{
	memset(longest, 'x', PHOSIMG_STAT_NAME_MAX);
	longest[PHOSIMG_STAT_NAME_MAX] = 0;
	set_ok &= phosimg_writer_set_stat(w, "step_ns.park", 1234) == 0;
	set_ok &= phosimg_writer_set_stat(w, "stall_ns", 1) == 0;
	set_ok &= phosimg_writer_set_stat(w, "cow_shadows", 0) == 0;
	set_ok &= phosimg_writer_set_stat(w, "step_ns.driver-checkpoint", UINT64_MAX) == 0;
	set_ok &= phosimg_writer_set_stat(w, longest, 7) == 0;
	set_ok &= phosimg_writer_set_stat(w, "stall_ns", 512345678) == 0; /* again: the last value counts */
}

static int refused = 0, nrefused = 0;

static void set_bad(phosimg_writer *w)
{
	char toolong[PHOSIMG_STAT_NAME_MAX + 2];
	memset(toolong, 'y', sizeof(toolong) - 1);
	toolong[sizeof(toolong) - 1] = 0;
	const char *bad[] = { "", "Stall_ns", "1st", "_x", ".x", "-x", "a b", "a/b", "a:b", "caf\xc3\xa9", toolong };
	nrefused = (int)(sizeof(bad) / sizeof(*bad)) + 1;
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		refused += phosimg_writer_set_stat(w, bad[i], 1) == -EINVAL;
	refused += phosimg_writer_set_stat(w, NULL, 1) == -EINVAL;
}

static int e2big = 0;

static void set_many(phosimg_writer *w)
{
	int good = 1;
	for (unsigned i = 0; i < PHOSIMG_STATS_MAX; i++) {
		char name[32];
		snprintf(name, sizeof(name), "n%04u", PHOSIMG_STATS_MAX - 1 - i); /* backwards */
		good &= phosimg_writer_set_stat(w, name, i) == 0;
	}
	e2big = good && phosimg_writer_set_stat(w, "one_more", 1) == -E2BIG &&
		phosimg_writer_set_stat(w, "n0000", 99) == 0; /* a name it has still takes a value */
}

static void to_1_5(uint8_t *m, size_t n, void *arg)
{
	(void)n, (void)arg;
	m[6] = 5, m[7] = 0;
}

/* The manifest's section of type `type`, or NULL. */
static uint8_t *section(uint8_t *m, size_t n, uint32_t type)
{
	size_t at = 32;
	uint32_t count = (uint32_t)m[24] | (uint32_t)m[25] << 8;
	for (uint32_t i = 0; i < count && at + 16 <= n - 24; i++) {
		uint64_t len = 0;
		for (int k = 7; k >= 0; k--)
			len = len << 8 | m[at + 8 + k];
		if (m[at] == type && !m[at + 1] && !m[at + 2] && !m[at + 3])
			return m + at;
		at = (size_t)((at + 16 + len + 7) & ~7ull);
	}
	return NULL;
}

static int had_stats_section;

/* Makes the STATS section one of a type no reader knows, not critical:
 * what a 1.5 reader sees of it. */
static void stats_unknown(uint8_t *m, size_t n, void *arg)
{
	(void)arg;
	uint8_t *s = section(m, n, 12);
	had_stats_section = s != NULL;
	if (s)
		s[0] = 99;
}

/* Opens path; its stats' count, or -1 where it does not open. */
static int stat_count(const char *path, uint16_t *minor)
{
	phosimg *img;
	if (phosimg_open(path, &img))
		return -1;
	const phosimg_info *in = phosimg_get_info(img);
	int n = (int)in->stat_count;
	*minor = in->version_minor;
	if (phosimg_verify(img))
		n = -1;
	phosimg_close(img);
	return n;
}

/* Whether python3's json module parses the file. */
static int python_parses(const char *file)
{
	char cmd[PATH_MAX + 96];
	snprintf(cmd, sizeof(cmd), "python3 -c 'import json,sys; json.load(sys.stdin)' < '%s' 2>/dev/null", file);
	return system(cmd) == 0;
}

/* Whether o's key is the string want. */
static int json_str_is(json_t *o, const char *key, const char *want)
{
	const char *v = json_string_value(json_object_get(o, key));
	return v && !strcmp(v, want);
}

static uint64_t json_u64(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_integer(v) ? (uint64_t)json_integer_value(v) : json_is_real(v) ? (uint64_t)json_real_value(v) : 0;
}

int main(void)
{
	plan(13);
	char *dir = scratch_dir("stats");
	data = malloc(size);
	fill(data, size, 3, 1);
	char a[PATH_MAX], none[PATH_MAX], old[PATH_MAX], many[PATH_MAX], bad[PATH_MAX], out[PATH_MAX];
	snprintf(a, sizeof(a), "%s/a", dir);
	snprintf(none, sizeof(none), "%s/none", dir);
	snprintf(old, sizeof(old), "%s/old", dir);
	snprintf(many, sizeof(many), "%s/many", dir);
	snprintf(bad, sizeof(bad), "%s/bad", dir);
	snprintf(out, sizeof(out), "%s/out", dir);

	make(a, set_some);
	phosimg *img;
	if (phosimg_open(a, &img))
		bail("open: %s", phosimg_last_error());
	const phosimg_info *in = phosimg_get_info(img);
	int order = in->stat_count == 5;
	for (uint32_t i = 1; order && i < in->stat_count; i++)
		order = strcmp(in->stats[i - 1].name, in->stats[i].name) < 0;
	uint64_t stall = 0, park = 0, big = 0, shadows = 9, lng = 0, missing = 0;
	ok(set_ok && order && in->version_major == 1 && in->version_minor == 6,
	   "a 1.6 image keeps its 5 stats, in ascending order of their names (%u)", in->stat_count);
	ok(phosimg_stat_get(in, "stall_ns", &stall) == 0 && stall == 512345678 &&
		   phosimg_stat_get(in, "step_ns.park", &park) == 0 && park == 1234 &&
		   phosimg_stat_get(in, "step_ns.driver-checkpoint", &big) == 0 && big == UINT64_MAX &&
		   phosimg_stat_get(in, "cow_shadows", &shadows) == 0 && shadows == 0 &&
		   phosimg_stat_get(in, longest, &lng) == 0 && lng == 7,
	   "each reads back by name, 0 and 2^64-1 too, and a name set twice has its last value");
	ok(phosimg_stat_get(in, "publish_ns", &missing) == -ENOENT && phosimg_stat_get(in, NULL, &missing) == -EINVAL,
	   "a name the image lacks is -ENOENT");
	ok(phosimg_verify(img) == 0, "the image verifies");
	phosimg_close(img);

	make(bad, set_bad);
	uint16_t minor = 0;
	ok(refused == nrefused && stat_count(bad, &minor) == 0,
	   "bad names (empty, upper case, not starting with a letter, other bytes, over %d bytes, NULL) are refused "
	   "with EINVAL and leave no stat (%d of %d)",
	   PHOSIMG_STAT_NAME_MAX, refused, nrefused);

	make(many, set_many);
	uint64_t v0 = 0, vlast = 0;
	int nmany = -1;
	if (phosimg_open(many, &img) == 0) {
		in = phosimg_get_info(img);
		nmany = (int)in->stat_count;
		phosimg_stat_get(in, "n0000", &v0);
		phosimg_stat_get(in, "n1023", &vlast);
		phosimg_close(img);
	}
	ok(e2big && nmany == PHOSIMG_STATS_MAX && v0 == 99 && vlast == 0,
	   "%d stats are kept; one more name is refused with E2BIG (%d read back)", PHOSIMG_STATS_MAX, nmany);

	/* No stats: no section, so a 1.5 reader reads all of it. */
	make(none, NULL);
	snprintf(old, sizeof(old), "%s/old", dir);
	char cp[2 * PATH_MAX + 16];
	snprintf(cp, sizeof(cp), "cp -r '%s' '%s'", none, old);
	if (system(cp) != 0)
		bail("cp");
	patch_manifest(old, to_1_5, NULL);
	minor = 0;
	int n_none = stat_count(none, &minor);
	ok(n_none == 0 && minor == 6, "an image given no stats has none");
	int n_old = stat_count(old, &minor);
	ok(n_old == 0 && minor == 5, "a 1.5 image (no STATS section) reads and verifies, with no stats");

	/* A reader that does not know STATS skips it: it is not critical. */
	char unknown[PATH_MAX];
	snprintf(unknown, sizeof(unknown), "%s/unknown", dir);
	snprintf(cp, sizeof(cp), "cp -r '%s' '%s'", a, unknown);
	if (system(cp) != 0)
		bail("cp");
	patch_manifest(unknown, stats_unknown, NULL);
	ok(had_stats_section && stat_count(unknown, &minor) == 0,
	   "the STATS section is not critical: as a section of an unknown type, it is skipped");

	ok(run_tool(out, "info", a, NULL) == 0 && file_contains(out, "stat stall_ns: 512345678\n") &&
		   file_contains(out, "stat step_ns.driver-checkpoint: 18446744073709551615\n"),
	   "phos-image info prints each stat");

	int rc = run_tool(out, "info", "--json", a);
	json_error_t jerr;
	json_t *j = rc == 0 ? json_load_file(out, 0, &jerr) : NULL;
	json_t *stats = json_object_get(j, "stats"), *cmd = json_object_get(j, "cmdline");
	ok(rc == 0 && python_parses(out), "phos-image info --json writes JSON that Python's json module parses");
	ok(j && json_str_is(j, "format", "1.6") && json_str_is(j, "protocol", "cow") && json_u64(j, "pid") == 4242 &&
		   json_array_size(cmd) == 4 && json_string_value(json_array_get(cmd, 3)) &&
		   !strcmp(json_string_value(json_array_get(cmd, 3)), "0.1") &&
		   json_u64(j, "gpu_bytes") == size && json_u64(j, "chunks") == 4 &&
		   json_u64(json_object_get(j, "criu_files"), "count") == 1 &&
		   json_u64(json_object_get(j, "criu_files"), "bytes") == 4 && json_is_null(json_object_get(j, "parent")) &&
		   json_object_size(stats) == 5 && json_u64(stats, "stall_ns") == 512345678 &&
		   json_u64(stats, "step_ns.park") == 1234,
	   "its object holds the manifest (format, protocol, pid, cmdline, chunks, CRIU files) and the stats by name");
	json_decref(j);
	rc = run_tool(out, "info", "--json", old);
	j = rc == 0 ? json_load_file(out, 0, &jerr) : NULL;
	ok(j && python_parses(out) && json_is_object(json_object_get(j, "stats")) &&
		   json_object_size(json_object_get(j, "stats")) == 0 &&
		   json_str_is(j, "format", "1.5"),
	   "a 1.5 image's JSON has an empty stats object");
	json_decref(j);

	free(data);
	rm_rf(dir);
	free(dir);
	return done();
}
