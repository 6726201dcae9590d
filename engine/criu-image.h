/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Reading CRIU's images (criu-image.c) without CRIU's own code: the list
 * of files (files.img) entry by entry, the protobuf fields inside them,
 * and the statistics of a dump (stats-dump).
 */
#ifndef PHOS_ENGINE_CRIU_IMAGE_H
#define PHOS_ENGINE_CRIU_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* file_entry's fields (CRIU's images/fdinfo.proto) that phos reads. */
#define CRIU_FILE_INET 4  /* inet_sk_entry */
#define CRIU_FILE_UNIX 16 /* unix_sk_entry */

/* What CRIU's dump measured (its stats-dump image, images/stats.proto):
 * microseconds freezing the tree, frozen (until CRIU let it go),
 * collecting memory pages and writing them; pages it scanned and wrote,
 * private and shared. */
typedef struct criu_dump_stats {
	uint32_t freezing_us, frozen_us, memdump_us, memwrite_us;
	uint64_t pages_scanned, pages_written, shpages_written;
} criu_dump_stats;

/* What CRIU's restore measured (its stats-restore, images/stats.proto):
 * microseconds forking the tree, and restoring it (from the start until
 * every task had its state back, before they run); pages it restored,
 * and pages it compared with a parent image and skipped. */
typedef struct criu_restore_stats {
	uint32_t forking_us, restore_us;
	uint64_t pages_restored, pages_compared, pages_skipped_cow;
} criu_restore_stats;

/* Reads dir/files.img whole into *buf (size bytes, the caller frees it).
 * Errors: -errno of opening or reading it (-ENOENT: there is none),
 * -ENAMETOOLONG, -EBADMSG (cut short), -ENOMEM. */
int criu_files_read(const char *dir, uint8_t **buf, size_t *size);

/* Calls fn on the body (len bytes, inside buf) of every field `which` of
 * every entry of buf (files.img, size bytes), in order, until fn returns
 * non-zero, which it returns. Errors: -EBADMSG (buf is not a files.img,
 * or an entry is malformed). */
int criu_files_each(uint8_t *buf, size_t size, unsigned which, int (*fn)(uint8_t *body, size_t len, void *arg),
		    void *arg);

/* Reads the statistics CRIU wrote at the end of a dump into dir
 * (dir/stats-dump) into *st. Errors: -errno of opening or reading it
 * (-ENOENT: there is none), -ENAMETOOLONG, -EBADMSG (not a stats image,
 * or malformed), -ENOMEM. */
int criu_dump_stats_read(const char *dir, criu_dump_stats *st);

/* Reads the statistics CRIU wrote at the end of a restore into its work
 * directory dir (dir/stats-restore) into *st. Errors: as
 * criu_dump_stats_read's (-EBADMSG for a dump's stats). */
int criu_restore_stats_read(const char *dir, criu_restore_stats *st);

/* A protobuf varint at *p (below end) into *v; false if it runs past end. */
bool pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v);

/* One field of a protobuf message: its number and wire type, its value
 * when a varint (wire type 0), its bytes when length-delimited (2). */
typedef struct pb_item {
	unsigned field, wt;
	uint64_t v;
	const uint8_t *body;
	size_t len;
} pb_item;

/* Reads the field at *p (below end) into *it and steps past it. False if
 * it is malformed. */
bool pb_next(const uint8_t **p, const uint8_t *end, pb_item *it);

#endif
