/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Fuzzing the reader and verify with mutated images.
 *
 * Raw mutations (at least 10,000: bit flips, truncation, grown files and
 * headers, huge length fields, zeroed ranges) of any file of a two-image
 * chain must all be rejected by open or verify: none may be accepted.
 *
 * Structure mutations then fix the checksums up, so that the parsers behind
 * them see hostile but well-checksummed manifests and indexes; these must
 * not crash (the suite also runs under ASan), and an image they leave
 * acceptable must read without error or fail cleanly.
 *
 * Mutations of the STATS section alone (its count, name lengths, names,
 * values; checksums fixed up) are rejected as corrupt or read as stats
 * that keep the section's rules.
 *
 * PHOS_FUZZ_ITERATIONS overrides the number of raw mutations.
 */
#include <xxhash.h>

#include "imgtest.h"

#define CHUNK 4096u

typedef struct file {
	char path[PATH_MAX + 64];
	uint8_t *data;
	size_t len;
} file;

static file files[16];
static int nfiles;
static uint64_t sizes[3] = { 20 * CHUNK + 100, 7 * CHUNK, 333 };
static uint8_t *content[3];

static void load(const char *path)
{
	file *f = &files[nfiles++];
	snprintf(f->path, sizeof(f->path), "%s", path);
	FILE *fp = fopen(path, "rb");
	if (!fp)
		bail("open %s", path);
	fseek(fp, 0, SEEK_END);
	f->len = (size_t)ftell(fp);
	fseek(fp, 0, SEEK_SET);
	f->data = malloc(f->len + 1);
	if (fread(f->data, 1, f->len, fp) != f->len)
		bail("read %s", path);
	fclose(fp);
}

static void put_bytes(const char *path, const uint8_t *p, size_t n)
{
	if (write_file(path, p, n))
		bail("write %s", path);
}

static void make_image(const char *path, const char *parent, int gen)
{
	phosimg_writer *w;
	phosimg_writer_opts o = { .chunk_size = CHUNK, .lz4 = true, .parent = parent };
	if (phosimg_writer_create(path, &o, &w))
		bail("create %s: %s", path, phosimg_last_error());
	static const char argv[] = "fuzz\0target\0";
	phosimg_device dev = { .cc_major = 9, .total_mem = 1ull << 37 };
	strcpy(dev.name, "NVIDIA H200");
	phosimg_meta meta = { .pid = 77, .cmdline = argv, .cmdline_len = sizeof(argv) - 1,
			      .protocol = PHOSIMG_PROTO_STOP, .devices = &dev, .device_count = 1 };
	phosimg_writer_set_meta(w, &meta);
	for (int i = 0; i < 3; i++) {
		phosimg_object ob = { .va = 0x500000000ull + (uint64_t)i * 0x1000000, .size = sizes[i] };
		uint32_t id;
		if (phosimg_writer_add_object(w, &ob, &id) || put_object(w, id, content[i], sizes[i], CHUNK, NULL))
			bail("write %s", path);
	}
	char f[PATH_MAX];
	snprintf(f, sizeof(f), "%s/core-%d.img", phosimg_writer_criu_dir(w), gen);
	put_bytes(f, content[1], 5000);
	snprintf(f, sizeof(f), "%s/inventory.img", phosimg_writer_criu_dir(w));
	put_bytes(f, content[0], 123);
	static const char *const stats[] = { "stall_ns", "step_ns.park", "step_ns.driver-checkpoint", "cow_shadows",
					     "criu_pages" };
	for (int i = 0; i < 5; i++)
		if (phosimg_writer_set_stat(w, stats[i], (uint64_t)gen << (8 * i)))
			bail("set_stat %s", stats[i]);
	if (phosimg_writer_finish(w))
		bail("finish %s: %s", path, phosimg_last_error());
}

/* Open + verify + read everything; returns 1 if the image was accepted. */
static int accepted(const char *path, int *wrong_bytes)
{
	phosimg *img;
	if (phosimg_open(path, &img) != 0)
		return 0;
	int ok_all = phosimg_verify(img) == 0;
	const phosimg_info *in = phosimg_get_info(img);
	for (uint32_t o = 0; o < in->object_count && o < 3; o++) {
		uint8_t *buf = malloc(in->objects[o].size);
		if (!buf)
			continue;
		int e = phosimg_read(img, o, 0, buf, in->objects[o].size);
		/* A read that succeeds must give the true bytes. */
		if (e == 0 && in->objects[o].size == sizes[o] && memcmp(buf, content[o], sizes[o]) != 0)
			(*wrong_bytes)++;
		if (e)
			ok_all = 0;
		free(buf);
	}
	phosimg_close(img);
	return ok_all;
}

static uint64_t rnd(unsigned *s)
{
	return ((uint64_t)rand_r(s) << 31) ^ (uint64_t)rand_r(s);
}

/* Applies one raw mutation to a copy of f; returns the new length. */
static size_t mutate(const file *f, uint8_t *out, size_t cap, unsigned *s, int *kind)
{
	size_t n = f->len;
	memcpy(out, f->data, n);
	*kind = (int)(rnd(s) % 7);
	switch (*kind) {
	case 0: { /* bit flips */
		int k = 1 + (int)(rnd(s) % 8);
		for (int i = 0; i < k; i++)
			out[rnd(s) % n] ^= (uint8_t)(1u << (rnd(s) % 8));
		break;
	}
	case 1: /* truncation */
		n = (size_t)(rnd(s) % n);
		break;
	case 2: { /* bytes inserted inside */
		size_t k = 1 + (size_t)(rnd(s) % 64), at = (size_t)(rnd(s) % n);
		if (n + k > cap)
			k = cap - n;
		memmove(out + at + k, out + at, n - at);
		for (size_t i = 0; i < k; i++)
			out[at + i] = (uint8_t)rnd(s);
		n += k;
		break;
	}
	case 3: { /* bytes appended */
		size_t k = 1 + (size_t)(rnd(s) % 4096);
		if (n + k > cap)
			k = cap - n;
		for (size_t i = 0; i < k; i++)
			out[n + i] = (uint8_t)rnd(s);
		n += k;
		break;
	}
	case 4: { /* a huge length in an aligned field */
		size_t at = (size_t)(rnd(s) % (n < 256 ? n : 256)) & ~(size_t)3;
		if (rnd(s) % 2)
			at = (size_t)(rnd(s) % n) & ~(size_t)3;
		static const uint64_t huge[] = { 0xFFFFFFFFull, 0x7FFFFFFFull, 0x80000000ull, 0xFFFFFFFFFFFFFFFFull,
						 1ull << 40, 0x10000ull };
		uint64_t v = huge[rnd(s) % 6];
		for (size_t i = 0; i < 8 && at + i < n; i++)
			out[at + i] = (uint8_t)(v >> (8 * i));
		break;
	}
	case 5: { /* a range zeroed */
		size_t at = (size_t)(rnd(s) % n), k = 1 + (size_t)(rnd(s) % 64);
		memset(out + at, 0, at + k > n ? n - at : k);
		break;
	}
	default: { /* a grown header: the header-size field and 8 more bytes */
		if (n >= 16) {
			uint32_t h = out[12] | (uint32_t)out[13] << 8;
			h += 8;
			out[12] = (uint8_t)h;
			out[13] = (uint8_t)(h >> 8);
			size_t at = 32 < n ? 32 : n;
			if (n + 8 <= cap) {
				memmove(out + at + 8, out + at, n - at);
				memset(out + at, 0, 8);
				n += 8;
			}
		}
	}
	}
	return n;
}

static void put_hash(uint8_t *p, const void *data, size_t n)
{
	XXH128_hash_t h = XXH3_128bits(data, n);
	for (int i = 0; i < 8; i++) {
		p[i] = (uint8_t)(h.low64 >> (8 * i));
		p[8 + i] = (uint8_t)(h.high64 >> (8 * i));
	}
}

static uint64_t le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Finds the INDEX section's payload in a manifest. */
static uint8_t *index_section(uint8_t *m, size_t n)
{
	size_t at = (size_t)le(m + 12, 4);
	while (at + 16 <= n - 24) {
		uint64_t t = le(m + at, 4), l = le(m + at + 8, 8);
		if (t == 6 && at + 16 + 32 <= n)
			return m + at + 16;
		at = (size_t)((at + 16 + l + 7) & ~7ull);
	}
	return NULL;
}

/* Finds the payload of the section of type t in a manifest, and its length. */
static uint8_t *find_section(uint8_t *m, size_t n, uint32_t t, size_t *len)
{
	size_t at = (size_t)le(m + 12, 4);
	while (at + 16 <= n - 24) {
		uint64_t ty = le(m + at, 4), l = le(m + at + 8, 8);
		if (ty == t && l <= n - 24 - at - 16) {
			*len = (size_t)l;
			return m + at + 16;
		}
		at = (size_t)((at + 16 + l + 7) & ~7ull);
	}
	return NULL;
}

/* Whether the stats read are as the section's rules say. */
static int stats_keep_the_rules(const phosimg_info *in)
{
	if (in->stat_count > PHOSIMG_STATS_MAX)
		return 0;
	for (uint32_t i = 0; i < in->stat_count; i++) {
		const char *s = in->stats[i].name;
		size_t n = strlen(s);
		if (n == 0 || n > PHOSIMG_STAT_NAME_MAX || s[0] < 'a' || s[0] > 'z' ||
		    strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_.-") != n ||
		    (i && strcmp(in->stats[i - 1].name, s) >= 0))
			return 0;
	}
	return 1;
}

/* Mutates the STATS section of the manifest m (n bytes) where it is:
 * its count, a record's name length, a name's bytes, a value, or any
 * byte; then makes the checksum good. */
static void mutate_stats(uint8_t *m, size_t n, unsigned *s)
{
	size_t len;
	uint8_t *p = find_section(m, n, 12, &len);
	if (!p || len < 8)
		bail("no STATS section");
	/* The records' offsets, walked as the writer wrote them. */
	size_t rec[8], nrec = 0;
	for (size_t at = 8; at + 10 <= len && nrec < 8;) {
		rec[nrec++] = at;
		at = (at + 10 + le(p + at + 8, 2) + 7) & ~(size_t)7;
	}
	size_t r = rec[rnd(s) % nrec];
	static const uint64_t counts[] = { 0, 1, 4, 6, 1024, 1025, 0xFFFFFFFFull };
	static const uint64_t lengths[] = { 0, 1, 7, 64, 65, 200, 0xFFFF };
	switch (rnd(s) % 6) {
	case 0:
		for (int k = 0; k < 4; k++)
			p[k] = (uint8_t)(counts[rnd(s) % 7] >> (8 * k));
		break;
	case 1: {
		uint64_t v = lengths[rnd(s) % 7];
		p[r + 8] = (uint8_t)v, p[r + 9] = (uint8_t)(v >> 8);
		break;
	}
	case 2: /* a byte of a name */
		p[r + 10 + rnd(s) % (le(p + r + 8, 2) ? le(p + r + 8, 2) : 1)] = (uint8_t)rnd(s);
		break;
	case 3: /* two names swapped: out of order */
		if (nrec > 1) {
			size_t q = rec[(rnd(s) % (nrec - 1)) + 1], o = rec[0];
			uint8_t t[10 + 64];
			size_t lq = 10 + le(p + q + 8, 2), lo = 10 + le(p + o + 8, 2);
			if (lq == lo && lq <= sizeof(t)) {
				memcpy(t, p + q, lq);
				memcpy(p + q, p + o, lq);
				memcpy(p + o, t, lq);
			}
		}
		break;
	case 4: /* a value: any is good */
		p[r + rnd(s) % 8] ^= (uint8_t)(1 + rnd(s) % 255);
		break;
	default:
		p[rnd(s) % len] ^= (uint8_t)(1u << (rnd(s) % 8));
	}
	put_hash(m + n - 16, m, n - 16);
}

int main(void)
{
	plan(5);
	const char *it = getenv("PHOS_FUZZ_ITERATIONS");
	long iterations = it ? atol(it) : 10000;
	struct stat sb;
	char *saved = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
	if (stat("/dev/shm", &sb) == 0)
		setenv("TMPDIR", "/dev/shm", 1); /* many small writes: keep them in memory */
	char *dir = scratch_dir("fuzz");
	if (saved)
		setenv("TMPDIR", saved, 1);
	else
		unsetenv("TMPDIR");
	free(saved);

	for (int i = 0; i < 3; i++) {
		content[i] = malloc(sizes[i]);
		fill(content[i], sizes[i], (uint64_t)i + 40, i != 1);
	}
	char base[PATH_MAX], child[PATH_MAX], p[PATH_MAX + 32];
	snprintf(base, sizeof(base), "%s/base", dir);
	snprintf(child, sizeof(child), "%s/child", dir);
	make_image(base, NULL, 1);
	fill(content[0] + 5 * CHUNK, 3 * CHUNK, 4444, 0); /* the child changes some chunks */
	make_image(child, "base", 2);
	const char *names[] = { "manifest.phos", "gpu.index", "gpu.data", "criu/core-1.img", "criu/core-2.img",
				"criu/inventory.img" };
	for (int i = 0; i < 6; i++) {
		for (int b = 0; b < 2; b++) {
			snprintf(p, sizeof(p), "%s/%s", b ? base : child, names[i]);
			if (access(p, F_OK) == 0)
				load(p);
		}
	}
	int wrong = 0;
	ok(accepted(child, &wrong) == 1 && wrong == 0, "the pristine chain is accepted (%d files)", nfiles);

	/* Raw mutations. */
	size_t cap = 0;
	for (int i = 0; i < nfiles; i++)
		cap = files[i].len + 8192 > cap ? files[i].len + 8192 : cap;
	uint8_t *buf = malloc(cap);
	unsigned seed = 20261121;
	long taken = 0, by_kind[7] = { 0 };
	for (long i = 0; i < iterations; i++) {
		file *f = &files[rnd(&seed) % (uint64_t)nfiles];
		int kind;
		size_t n = mutate(f, buf, cap, &seed, &kind);
		if (n == f->len && memcmp(buf, f->data, n) == 0) {
			i--; /* no change: not a mutation */
			continue;
		}
		by_kind[kind]++;
		put_bytes(f->path, buf, n);
		if (accepted(child, &wrong)) {
			taken++;
			if (taken <= 5)
				diag("accepted: %s mutated by kind %d", f->path, kind);
		}
		put_bytes(f->path, f->data, f->len);
	}
	ok(taken == 0, "0 of %ld mutated images accepted (flips %ld, truncations %ld, insertions %ld, appends %ld, "
		       "huge lengths %ld, zeroed %ld, grown headers %ld)",
	   iterations, by_kind[0], by_kind[1], by_kind[2], by_kind[3], by_kind[4], by_kind[5], by_kind[6]);

	/* phos-image verify agrees, on a sample. */
	int tool_wrong = 0;
	for (int i = 0; i < 40; i++) {
		file *f = &files[i % nfiles];
		int kind;
		size_t n;
		do
			n = mutate(f, buf, cap, &seed, &kind);
		while (n == f->len && memcmp(buf, f->data, n) == 0);
		put_bytes(f->path, buf, n);
		tool_wrong += run_tool(NULL, "verify", child, NULL) != 1;
		put_bytes(f->path, f->data, f->len);
	}
	ok(tool_wrong == 0, "phos-image verify exits 1 on 40 mutated images");

	/* Structure mutations with checksums fixed up. */
	file *man = &files[0], *idx = &files[2];
	if (strstr(man->path, "child/manifest.phos") == NULL || strstr(idx->path, "child/gpu.index") == NULL)
		bail("unexpected file order");
	uint8_t *mbuf = malloc(man->len + 8192);
	long open_ok = 0, fixed = iterations / 3;
	for (long i = 0; i < fixed; i++) {
		int kind;
		if (i % 2) {
			/* The manifest: mutate, then re-checksum. */
			size_t n = mutate(man, mbuf, man->len + 8192, &seed, &kind);
			if (n >= 40) {
				for (int k = 0; k < 4; k++)
					mbuf[n - 24 + k] = (uint8_t)(0x45534850u >> (8 * k));
				for (int k = 0; k < 8; k++)
					mbuf[16 + k] = (uint8_t)((uint64_t)n >> (8 * k));
				put_hash(mbuf + n - 16, mbuf, n - 16);
			}
			put_bytes(man->path, mbuf, n);
		} else {
			/* The index: mutate, re-checksum it, and point the manifest at it. */
			size_t n = mutate(idx, buf, cap, &seed, &kind);
			if (n >= 16)
				put_hash(buf + n - 16, buf, n - 16);
			memcpy(mbuf, man->data, man->len);
			uint8_t *sec = index_section(mbuf, man->len);
			if (sec) {
				for (int k = 0; k < 8; k++)
					sec[k] = (uint8_t)((uint64_t)n >> (8 * k));
				put_hash(sec + 16, buf, n);
				put_hash(mbuf + man->len - 16, mbuf, man->len - 16);
			}
			put_bytes(idx->path, buf, n);
			put_bytes(man->path, mbuf, man->len);
		}
		phosimg *img;
		if (phosimg_open(child, &img) == 0) {
			open_ok++;
			phosimg_verify(img);
			const phosimg_info *in = phosimg_get_info(img);
			for (uint32_t o = 0; o < in->object_count && o < 8; o++) {
				uint64_t len = in->objects[o].size < (1u << 20) ? in->objects[o].size : (1u << 20);
				uint8_t *b = malloc(len);
				if (b)
					phosimg_read(img, o, 0, b, len);
				free(b);
			}
			phosimg_close(img);
		}
		put_bytes(man->path, man->data, man->len);
		put_bytes(idx->path, idx->data, idx->len);
	}
	ok(wrong == 0, "no read returned wrong bytes; %ld re-checksummed structure mutations parsed without a crash "
		       "(%ld opened)", fixed, open_ok);

	/* The STATS section alone, checksums fixed up. */
	long st_rejected = 0, st_read = 0, st_wrong = 0, st_other = 0, st_iters = iterations / 10 + 50;
	for (long i = 0; i < st_iters; i++) {
		memcpy(mbuf, man->data, man->len);
		mutate_stats(mbuf, man->len, &seed);
		put_bytes(man->path, mbuf, man->len);
		phosimg *img;
		int e = phosimg_open(child, &img);
		if (e == 0) {
			st_read++;
			st_wrong += !stats_keep_the_rules(phosimg_get_info(img));
			phosimg_close(img);
		} else if (e == -EBADMSG && *phosimg_last_error()) {
			st_rejected++;
		} else {
			st_other++;
			if (st_other <= 3)
				diag("STATS mutation failed with %d: %s", e, phosimg_last_error());
		}
	}
	put_bytes(man->path, man->data, man->len);
	ok(st_rejected > 0 && st_wrong == 0 && st_other == 0 && accepted(child, &wrong) == 1,
	   "%ld mutations of the STATS section: %ld rejected as corrupt with a message, %ld read with stats that keep its "
	   "rules, %ld otherwise",
	   st_iters, st_rejected, st_read - st_wrong, st_wrong + st_other);

	free(mbuf);
	free(buf);
	for (int i = 0; i < nfiles; i++)
		free(files[i].data);
	for (int i = 0; i < 3; i++)
		free(content[i]);
	rm_rf(dir);
	free(dir);
	return done();
}
