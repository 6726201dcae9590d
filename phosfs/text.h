/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A generated file's contents (text.c): text that grows as it is made,
 * the way every file of /phos is made whole at open.
 */
#ifndef PHOSFS_TEXT_H
#define PHOSFS_TEXT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

typedef struct text {
	char *s;   /* malloc'd, owned by the text; NULL while empty */
	size_t len, cap;
	bool oom;  /* a piece could not be added: the text is incomplete */
} text;

/* Appends printf-style text to t; on a failed allocation sets t->oom
 * and leaves t as it was. */
void text_add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A JSON string of s, its bytes that are not UTF-8 as '?' (jansson takes
 * only UTF-8). NULL only when out of memory. */
json_t *text_json(const char *s);
/* Frees t's contents and empties it. */
void text_free(text *t);

#endif
