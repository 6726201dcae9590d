/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * On-disk constants and little-endian codecs of the phos image format
 * (FORMAT.md), shared by the writer, the reader and the tool. Internal.
 */
#ifndef PHOSIMG_FORMAT_H
#define PHOSIMG_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "phosimg.h"

#define MANIFEST_FILE PHOSIMG_MANIFEST_FILE
#define INDEX_FILE PHOSIMG_INDEX_FILE
#define DATA_FILE PHOSIMG_DATA_FILE
#define CRIU_DIR PHOSIMG_CRIU_DIR

#define MANIFEST_MAGIC 0x4D534850u     /* "PHSM" */
#define MANIFEST_END_MAGIC 0x45534850u /* "PHSE" */
#define INDEX_MAGIC 0x58494850u        /* "PHIX" */
#define DATA_MAGIC 0x41444850u         /* "PHDA" */
#define ENDIAN_MARK 0x01020304u

#define MANIFEST_HEADER_SIZE 32u
#define MANIFEST_TRAILER_SIZE 24u
#define SECTION_HEADER_SIZE 16u
#define SECTION_CRITICAL 0x1u
#define MANIFEST_MAX (64u << 20)

enum section_type {
	SEC_PROCESS = 1,
	SEC_DEVICES = 2,
	SEC_CHECKPOINT = 3,
	SEC_PARENT = 4,
	SEC_OBJECTS = 5,
	SEC_INDEX = 6,
	SEC_DATA = 7,
	SEC_CRIU = 8,
	SEC_MEMBERS = 9,
	SEC_STRIPES = 10,
	SEC_SHARES = 11,
	SEC_STATS = 12,
};

#define CHECKPOINT_SECTION_SIZE 56u
#define OBJECT_RECORD_SIZE 32u
#define MEMBER_RECORD_SIZE 40u
#define SHARE_RECORD_SIZE 16u
#define STAT_RECORD_MIN 16u /* a value, a name length, a name byte, padding */
#define INDEX_SECTION_SIZE 32u
#define DATA_SECTION_SIZE 16u
#define CHECKSUM_XXH3_128 1u

#define INDEX_HEADER_SIZE 32u
#define INDEX_ENTRY_SIZE 48u
#define INDEX_TRAILER_SIZE 16u

#define DATA_HEADER_SIZE 4096u
#define DATA_ALIGN 4096u

#define ENTRY_LZ4 0x1u
#define ENTRY_PARENT 0x2u
#define ENTRY_KNOWN_FLAGS (ENTRY_LZ4 | ENTRY_PARENT)
#define ENTRY_STRIPE_SHIFT 8 /* bits 8-15: the data file (since 1.3) */
#define ENTRY_STRIPE_MASK 0xff00u

/* One index entry, decoded. */
typedef struct entry {
	uint32_t object;
	uint32_t flags;
	uint64_t chunk;
	uint64_t location; /* data offset, or the parent's object id */
	uint32_t stored_len;
	uint32_t raw_len;
	uint8_t hash[16];
} entry;

static inline void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static inline uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

/* hash.c: XXH3-128 of buf, stored as low64 then high64, little-endian. */
void fmt_hash(const void *buf, size_t len, uint8_t out[16]);
/* Reads len bytes at off into buf, as fmt_read_all, and puts their
 * fmt_hash in out, hashing each piece right after it is read. Errors: as
 * fmt_read_all. */
int fmt_read_hashed(int fd, void *buf, size_t len, uint64_t off, uint8_t out[16]);
/* The same for a part of what is hashed: reads len bytes at *off into
 * buf, adding each piece to st right after its read; *off moves past
 * each piece read (on an error it is where the failed piece starts).
 * Errors: as fmt_read_all. */
struct XXH3_state_s;
int fmt_read_hashing(int fd, void *buf, size_t len, uint64_t *off, struct XXH3_state_s *st);

void fmt_encode_entry(uint8_t *p, const entry *e);
void fmt_decode_entry(const uint8_t *p, entry *e);

/* error.c: sets this thread's message and returns err (a negative errno). */
int fmt_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fmt_clear_error(void);

/* io.c: whole-file helpers that retry short transfers. */
int fmt_write_all(int fd, const void *buf, size_t len, uint64_t off);
int fmt_read_all(int fd, void *buf, size_t len, uint64_t off);
/* Reads a whole small file into a malloc'd buffer of at most max bytes. */
int fmt_slurp(int dirfd, const char *name, const char *shown, size_t max, uint8_t **buf, size_t *len);
/* A malloc'd string made as printf would, or NULL. */
char *fmt_strdupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Splits path into its directory ("." or "/" where it has none) and its
 * last component, both malloc'd. Errors: -EINVAL (no usable last
 * component: empty, ".", ".."), -ENOMEM. */
int fmt_split_path(const char *path, char **dir, char **base);
/* fsyncs a directory by path. */
int fmt_fsync_dir(const char *path);

#endif

/* manifest.c: the decoded manifest. info's pointers point into the owned
 * arrays beside it. */
typedef struct manifest {
	phosimg_info info;
	char *cmdline;
	phosimg_device *devices;
	phosimg_object *objects;
	phosimg_member *members;
	phosimg_criu_file *criu;
	phosimg_share *shares;
	phosimg_stat *stats; /* in ascending byte order of their names */
	uint64_t index_size, index_entries;
	uint8_t index_hash[16];
	uint64_t data_size, stored_bytes;
	/* Data files (1 + those of the STRIPES section) and their sizes;
	 * file_size[0] is data_size. */
	uint32_t nfiles;
	uint64_t file_size[PHOSIMG_STRIPES_MAX];
} manifest;

/* Serialises m into a malloc'd buffer. Errors: -ENOMEM. */
int manifest_encode(const manifest *m, uint8_t **buf, size_t *len);
/* Parses and checks a whole manifest file; shown names it in messages.
 * Errors: -EBADMSG, -EPROTONOSUPPORT, -ENOMEM. */
int manifest_decode(const uint8_t *buf, size_t len, const char *shown, manifest *m);
void manifest_free(manifest *m);
/* Whether the n bytes at s are a stat's name (phosimg_stat). */
bool manifest_stat_name_ok(const char *s, size_t n);
