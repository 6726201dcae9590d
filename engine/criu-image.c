/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Reading CRIU's images (criu-image.h).
 *
 * An image is two 32-bit magic numbers (the first is CRIU's common one,
 * or its service one for images such as stats), then entries, each a
 * 32-bit length and a protobuf message.
 * - files.img: file_entry (CRIU's images/fdinfo.proto): field 1 its type,
 *   2 its id, then one sub-message for its kind (inet socket 4, unix
 *   socket 16, ...).
 * - stats-dump: one stats_entry (images/stats.proto) whose field 1 is a
 *   dump_stats_entry.
 */
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "criu-image.h"

#define CRIU_COMMON_MAGIC 0x54564319u
#define CRIU_SERVICE_MAGIC 0x55105940u
#define CRIU_FILES_MAGIC 0x56303138u
#define CRIU_STATS_MAGIC 0x57093306u

bool pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	*v = 0;
	for (int shift = 0; *p < end && shift < 64; shift += 7) {
		uint8_t b = *(*p)++;
		*v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			return true;
	}
	return false;
}

/* Steps over one field of wire type wt at *p; a length-delimited one's
 * bytes are *body and *len. False if it is malformed. */
static bool pb_field(const uint8_t **p, const uint8_t *end, unsigned wt, const uint8_t **body, size_t *len)
{
	uint64_t v;
	switch (wt) {
	case 0:
		return pb_varint(p, end, &v);
	case 1:
		if (end - *p < 8)
			return false;
		*p += 8;
		return true;
	case 5:
		if (end - *p < 4)
			return false;
		*p += 4;
		return true;
	case 2:
		if (!pb_varint(p, end, &v) || v > (uint64_t)(end - *p))
			return false;
		*body = *p;
		*len = (size_t)v;
		*p += v;
		return true;
	}
	return false;
}

bool pb_next(const uint8_t **p, const uint8_t *end, pb_item *it)
{
	uint64_t key;
	if (!pb_varint(p, end, &key))
		return false;
	*it = (pb_item){ .field = (unsigned)(key >> 3), .wt = key & 7 };
	return it->wt == 0 ? pb_varint(p, end, &it->v) : pb_field(p, end, it->wt, &it->body, &it->len);
}

/* Calls fn on every field `which` (length-delimited) of every entry of
 * buf, an image whose magic numbers are m0 and m1, as criu_files_each. */
static int image_each(uint8_t *buf, size_t size, uint32_t magic0, uint32_t magic1, unsigned which,
		      int (*fn)(uint8_t *body, size_t len, void *arg), void *arg)
{
	if (size < 8)
		return -EBADMSG;
	uint32_t m0, m1;
	memcpy(&m0, buf, 4);
	memcpy(&m1, buf + 4, 4);
	if (m0 != magic0 || m1 != magic1)
		return -EBADMSG;
	for (size_t off = 8; off < size;) {
		uint32_t len;
		if (size - off < 4)
			return -EBADMSG;
		memcpy(&len, buf + off, 4);
		off += 4;
		if (len > size - off)
			return -EBADMSG;
		const uint8_t *p = buf + off, *end = p + len;
		off += len;
		while (p < end) {
			pb_item f;
			if (!pb_next(&p, end, &f))
				return -EBADMSG;
			if (f.field != which || f.wt != 2)
				continue;
			int r = fn((uint8_t *)f.body, f.len, arg);
			if (r)
				return r;
		}
	}
	return 0;
}

int criu_files_each(uint8_t *buf, size_t size, unsigned which, int (*fn)(uint8_t *body, size_t len, void *arg),
		    void *arg)
{
	return image_each(buf, size, CRIU_COMMON_MAGIC, CRIU_FILES_MAGIC, which, fn, arg);
}

/* Reads dir/name whole into *buf (size bytes, the caller frees it). */
static int image_read(const char *dir, const char *name, uint8_t **buf, size_t *size)
{
	char path[PATH_MAX];
	if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0) {
		int e = -errno;
		if (fd >= 0)
			close(fd);
		return e;
	}
	*size = (size_t)st.st_size;
	*buf = malloc(*size ? *size : 1);
	int e = *buf ? 0 : -ENOMEM;
	for (size_t got = 0; !e && got < *size;) {
		ssize_t r = pread(fd, *buf + got, *size - got, (off_t)got);
		if (r <= 0)
			e = r < 0 ? -errno : -EBADMSG;
		else
			got += (size_t)r;
	}
	close(fd);
	if (e) {
		free(*buf);
		*buf = NULL;
	}
	return e;
}

int criu_files_read(const char *dir, uint8_t **buf, size_t *size)
{
	return image_read(dir, "files.img", buf, size);
}

/* A varint field of a stats entry and where it goes in the stats. */
typedef struct stat_field {
	unsigned field;
	size_t off;
	bool u32; /* a uint32_t there, else a uint64_t */
} stat_field;

/* Takes the varint fields of a stats entry (body, len) that fields lists
 * (n of them) into st; steps over the others. 1, or -EBADMSG. */
static int take_fields(const uint8_t *body, size_t len, void *st, const stat_field *fields, size_t n)
{
	const uint8_t *p = body, *end = body + len;
	while (p < end) {
		pb_item f;
		if (!pb_next(&p, end, &f))
			return -EBADMSG;
		uint64_t v = f.wt == 0 ? f.v : 0;
		for (size_t i = 0; i < n; i++)
			if (fields[i].field == f.field) {
				if (fields[i].u32)
					*(uint32_t *)((char *)st + fields[i].off) = (uint32_t)v;
				else
					*(uint64_t *)((char *)st + fields[i].off) = v;
			}
	}
	return 1;
}

#define U32(t, m, k) { k, offsetof(t, m), true }
#define U64(t, m, k) { k, offsetof(t, m), false }

/* Takes stats_entry's dump_stats_entry (body, len) into the stats. */
static int take_dump_stats(uint8_t *body, size_t len, void *arg)
{
	static const stat_field f[] = {
		U32(criu_dump_stats, freezing_us, 1),	   U32(criu_dump_stats, frozen_us, 2),
		U32(criu_dump_stats, memdump_us, 3),	   U32(criu_dump_stats, memwrite_us, 4),
		U64(criu_dump_stats, pages_scanned, 5),	   U64(criu_dump_stats, pages_written, 7),
		U64(criu_dump_stats, shpages_written, 14),
	};
	return take_fields(body, len, arg, f, sizeof(f) / sizeof(*f));
}

/* Takes stats_entry's restore_stats_entry (body, len) into the stats. */
static int take_restore_stats(uint8_t *body, size_t len, void *arg)
{
	static const stat_field f[] = {
		U64(criu_restore_stats, pages_compared, 1), U64(criu_restore_stats, pages_skipped_cow, 2),
		U32(criu_restore_stats, forking_us, 3),	    U32(criu_restore_stats, restore_us, 4),
		U64(criu_restore_stats, pages_restored, 5),
	};
	return take_fields(body, len, arg, f, sizeof(f) / sizeof(*f));
}

/* Reads the stats image dir/name: its stats_entry's field `which`, by fn
 * into st (zeroed first). */
static int stats_read(const char *dir, const char *name, unsigned which, int (*fn)(uint8_t *, size_t, void *),
		      void *st, size_t size_of)
{
	uint8_t *buf;
	size_t size;
	memset(st, 0, size_of);
	int e = image_read(dir, name, &buf, &size);
	if (e)
		return e;
	e = image_each(buf, size, CRIU_SERVICE_MAGIC, CRIU_STATS_MAGIC, which, fn, st);
	free(buf);
	/* 1: the entry was read; 0: the image held none. */
	return e == 1 ? 0 : e ? e : -EBADMSG;
}

int criu_dump_stats_read(const char *dir, criu_dump_stats *st)
{
	return stats_read(dir, "stats-dump", 1, take_dump_stats, st, sizeof(*st));
}

int criu_restore_stats_read(const char *dir, criu_restore_stats *st)
{
	return stats_read(dir, "stats-restore", 2, take_restore_stats, st, sizeof(*st));
}
