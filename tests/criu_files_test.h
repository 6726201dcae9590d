/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Writing CRIU's list of files (files.img) by hand, for the tests of
 * what phos reads in it (engine/criu-image.h): protobuf fields and
 * file entries.
 */
#ifndef PHOS_TESTS_CRIU_FILES_TEST_H
#define PHOS_TESTS_CRIU_FILES_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"

typedef struct buf {
	uint8_t p[4096];
	size_t n;
} buf;

static inline void put(buf *b, const void *p, size_t n)
{
	if (b->n + n > sizeof(b->p))
		bail("test buffer too small");
	memcpy(b->p + b->n, p, n);
	b->n += n;
}

static inline void varint(buf *b, uint64_t v)
{
	do {
		uint8_t c = (uint8_t)(v & 0x7f);
		v >>= 7;
		if (v)
			c |= 0x80;
		put(b, &c, 1);
	} while (v);
}

static inline void field_varint(buf *b, unsigned f, uint64_t v)
{
	varint(b, (uint64_t)f << 3);
	varint(b, v);
}

static inline void field_bytes(buf *b, unsigned f, const void *p, size_t n)
{
	varint(b, (uint64_t)f << 3 | 2);
	varint(b, n);
	put(b, p, n);
}

/* files.img's two magic numbers, into an empty b. */
static inline void files_magic(buf *b)
{
	uint32_t magic[2] = { 0x54564319u, 0x56303138u };
	b->n = 0;
	put(b, magic, sizeof(magic));
}

/* Appends a file_entry of `type` and id, holding body (a sub-message) as
 * its field `which`. */
static inline void file_entry(buf *out, uint64_t type, uint32_t id, unsigned which, const buf *body)
{
	buf fe = { .n = 0 };
	field_varint(&fe, 1, type);
	field_varint(&fe, 2, id);
	field_bytes(&fe, which, body->p, body->n);
	uint32_t len = (uint32_t)fe.n;
	put(out, &len, 4);
	put(out, fe.p, fe.n);
}

/* b with one to four bytes changed at random, and one time in four cut
 * short at random (rand(): the caller seeds it). */
static inline buf corrupted(const buf *b)
{
	buf c = *b;
	int flips = 1 + rand() % 4;
	for (int k = 0; k < flips; k++)
		c.p[rand() % c.n] = (uint8_t)rand();
	if (rand() % 4 == 0)
		c.n = (size_t)rand() % c.n;
	return c;
}

static inline void write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "w");
	if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0)
		bail("cannot write %s", path);
}

static inline size_t read_file(const char *path, uint8_t *p, size_t cap)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(p, 1, cap, f);
	fclose(f);
	return n;
}

#endif
