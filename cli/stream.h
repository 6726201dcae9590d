/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The stream `phos send` writes and `phos receive` reads (stream.c;
 * doc/STREAM.md): a checkpoint image as records, so that a pipe, ssh or
 * any byte stream carries it while it is written. Functions return 0 or a
 * negative errno.
 */
#ifndef PHOS_CLI_STREAM_H
#define PHOS_CLI_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define STREAM_VERSION 1
#define STREAM_NAME_MAX 64           /* a checkpoint's name */
#define STREAM_PATH_MAX 255          /* a file's path inside the image */
#define STREAM_DATA_MAX (4u << 20)   /* bytes one record carries at most */
#define STREAM_REASON_MAX 4096       /* an ABORT's reason */

enum stream_type {
	STREAM_FILE = 1,  /* bytes of a file of the image, at an offset */
	STREAM_DIR = 2,   /* a folder of the image (criu) */
	STREAM_END = 3,   /* the image is whole: offset is the bytes of files sent */
	STREAM_ABORT = 4, /* the sender gives up: the data is its reason */
	STREAM_META = 5,  /* all but the rest of gpu.data has come: offset is gpu.data's size */
};

typedef struct stream_rec {
	uint32_t type;
	char path[STREAM_PATH_MAX + 1];
	uint64_t offset, len; /* len bytes of data follow the record */
} stream_rec;

/* Writes the stream's head: the magic, the version, and the image's
 * source, process pid's checkpoint name. Errors: write's (-EPIPE). */
int stream_write_head(int fd, pid_t pid, const char *name);

/* Reads the head. Errors: -ENODATA (the stream was empty), -EPROTO (no
 * phos stream, or a version this phos cannot read; why says which),
 * read's. */
int stream_read_head(int fd, pid_t *pid, char *name, char *why, size_t len);

/* Writes one record and its len bytes of data. Errors: -EINVAL (a path
 * too long, or more than STREAM_DATA_MAX bytes), write's. */
int stream_write_rec(int fd, uint32_t type, const char *path, uint64_t offset, const void *data, uint64_t len);

/* Reads one record's head into r; its r->len bytes of data are next on
 * fd (stream_read_full). Errors: -ENODATA (the stream ended between
 * records), -EPROTO (a record this phos does not know, or out of bounds),
 * read's. */
int stream_read_rec(int fd, stream_rec *r);

/* Reads exactly n bytes. Errors: -ENODATA (the stream ended first),
 * read's. */
int stream_read_full(int fd, void *buf, size_t n);

/* Writes all n bytes. Errors: write's (-EPIPE: the reader is gone). */
int stream_write_full(int fd, const void *buf, size_t n);

/* Whether path may name a file of an image: NAME or criu/NAME, where NAME
 * is 1 to 128 of A-Z a-z 0-9 . _ - and not "." or "..". */
bool stream_path_ok(const char *path, bool dir);

#endif
