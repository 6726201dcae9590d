/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Helpers for the image-format tests: scratch directories, test data and
 * running the phos-image tool.
 */
#ifndef PHOS_IMGTEST_H
#define PHOS_IMGTEST_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "phosimg.h"
#include "tap.h"
#include "testpath.h"

/* Rewrites the manifest of the image at dir with fix(m, n, arg) applied
 * to its bytes, and its checksum (XXH3-128 of all but the last 16 bytes,
 * little-endian) made good again; bails where it cannot. */
static inline void patch_manifest(const char *dir, void (*fix)(uint8_t *m, size_t n, void *arg), void *arg)
{
	char p[PATH_MAX + 32];
	snprintf(p, sizeof(p), "%s/manifest.phos", dir);
	static uint8_t m[1 << 16];
	FILE *f = fopen(p, "r+b");
	size_t n = f ? fread(m, 1, sizeof(m), f) : 0;
	if (n < 56)
		bail("cannot read %s", p);
	fix(m, n, arg);
	XXH128_hash_t h = XXH3_128bits(m, n - 16);
	for (int i = 0; i < 8; i++) {
		m[n - 16 + i] = (uint8_t)(h.low64 >> (8 * i));
		m[n - 8 + i] = (uint8_t)(h.high64 >> (8 * i));
	}
	fseek(f, 0, SEEK_SET);
	if (fwrite(m, 1, n, f) != n)
		bail("cannot write %s", p);
	fclose(f);
}

/* A fresh scratch directory under $TMPDIR, removed by rm_rf. */
static inline char *scratch_dir(const char *tag)
{
	static char path[PATH_MAX];
	const char *t = getenv("TMPDIR");
	snprintf(path, sizeof(path), "%s/phos-%s-XXXXXX", t && *t ? t : "/tmp", tag);
	if (!mkdtemp(path))
		bail("mkdtemp %s: %s", path, strerror(errno));
	return strdup(path);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st, (void)flag, (void)f;
	remove(p);
	return 0;
}

static inline void rm_rf(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Deterministic test bytes: compressible (runs and zeros) or not. */
static inline void fill(uint8_t *p, size_t n, uint64_t seed, int compressible)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
	for (size_t i = 0; i < n; i++) {
		if (compressible && (i / 512) % 2) {
			p[i] = (uint8_t)((i / 4096) + seed);
			continue;
		}
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

/* Stores every chunk of object obj from src, in the order of perm (a
 * permutation of the chunk numbers) or in order when perm is NULL. */
static inline int put_object(phosimg_writer *w, uint32_t obj, const uint8_t *src, uint64_t size, uint32_t chunk,
			     const uint64_t *perm)
{
	uint64_t n = size / chunk + (size % chunk != 0);
	for (uint64_t k = 0; k < n; k++) {
		uint64_t c = perm ? perm[k] : k;
		uint64_t off = c * chunk, len = size - off < chunk ? size - off : chunk;
		int e = phosimg_writer_put(w, obj, off, src + off, (size_t)len);
		if (e)
			return e;
	}
	return 0;
}

/* Starts an image at path holding n objects of the given sizes, va_step
 * apart in the address space; bails if it cannot. */
static inline phosimg_writer *start_image(const char *path, uint32_t chunk, bool lz4, const uint64_t *sizes, int n,
					  uint64_t va_step)
{
	phosimg_writer *w;
	phosimg_writer_opts opts = { .chunk_size = chunk, .lz4 = lz4 };
	if (phosimg_writer_create(path, &opts, &w))
		bail("create %s: %s", path, phosimg_last_error());
	for (int o = 0; o < n; o++) {
		phosimg_object ob = { .va = va_step * (uint64_t)(o + 1), .size = sizes[o] };
		uint32_t id;
		if (phosimg_writer_add_object(w, &ob, &id))
			bail("add object %d: %s", o, phosimg_last_error());
	}
	return w;
}

static inline void shuffle(uint64_t *v, uint64_t n, unsigned *seed)
{
	for (uint64_t i = 0; i < n; i++)
		v[i] = i;
	for (uint64_t i = n; i > 1; i--) {
		uint64_t j = (uint64_t)rand_r(seed) % i, t = v[i - 1];
		v[i - 1] = v[j];
		v[j] = t;
	}
}

/* Whether object obj of img reads back as exactly want. */
static inline int reads_back(phosimg *img, uint32_t obj, const uint8_t *want, uint64_t size)
{
	uint8_t *got = malloc(size);
	int same = got && phosimg_read(img, obj, 0, got, size) == 0 && memcmp(got, want, size) == 0;
	free(got);
	return same;
}

/* The phos-image tool beside the tests. */
static inline const char *tool_path(void)
{
	return test_path("PHOS_IMAGE_TOOL", "../phos-image");
}

/* Runs phos-image with args, output to out_file (or /dev/null); returns its
 * exit status, or -1. */
static inline int run_tool(const char *out_file, const char *a1, const char *a2, const char *a3)
{
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open(out_file ? out_file : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int nul = open("/dev/null", O_WRONLY);
		dup2(fd, 1);
		dup2(out_file ? fd : nul, 2);
		execl(tool_path(), "phos-image", a1, a2, a3, (char *)NULL);
		_exit(127);
	}
	int st;
	if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

static inline int file_contains(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	char buf[8192];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	return strstr(buf, needle) != NULL;
}

static inline int write_file(const char *path, const void *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return -errno;
	int ok = write(fd, p, n) == (ssize_t)n;
	close(fd);
	return ok ? 0 : -EIO;
}

#endif
