/*
 * Reading CRIU's list of files (files.img, criu-files.c): its entries and
 * the protobuf fields inside them, without CRIU's own code.
 */
#ifndef PHOS_ENGINE_CRIU_FILES_H
#define PHOS_ENGINE_CRIU_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* file_entry's fields (CRIU's images/fdinfo.proto) that phos reads. */
#define CRIU_FILE_INET 4  /* inet_sk_entry */
#define CRIU_FILE_UNIX 16 /* unix_sk_entry */

/* Reads dir/files.img whole into *buf (size bytes, the caller frees it).
 * Errors: -errno of opening or reading it (-ENOENT: there is none),
 * -EBADMSG (cut short), -ENOMEM. */
int criu_files_read(const char *dir, uint8_t **buf, size_t *size);

/* Calls fn on the body (len bytes, inside buf) of every field `which` of
 * every entry of buf (files.img, size bytes), in order, until fn returns
 * non-zero, which it returns. Errors: -EBADMSG (buf is not a files.img,
 * or an entry is malformed). */
int criu_files_each(uint8_t *buf, size_t size, unsigned which, int (*fn)(uint8_t *body, size_t len, void *arg),
		    void *arg);

/* A protobuf varint at *p (below end) into *v; false if it runs past end. */
bool pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v);

/* Steps over one field of wire type wt at *p; a length-delimited one's
 * bytes are *body and *len. False if it is malformed. */
bool pb_field(const uint8_t **p, const uint8_t *end, unsigned wt, const uint8_t **body, size_t *len);

#endif
