/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* This thread's last error message, and the format's shared codecs. */
#include <stdarg.h>
#include <stdio.h>

#include "format.h"

static _Thread_local char last[1024];

int fmt_fail(int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last, sizeof(last), fmt, ap);
	va_end(ap);
	return err;
}

void fmt_clear_error(void)
{
	last[0] = 0;
}

const char *phosimg_last_error(void)
{
	return last;
}

void fmt_encode_entry(uint8_t *p, const entry *e)
{
	put32(p, e->object);
	put32(p + 4, e->flags);
	put64(p + 8, e->chunk);
	put64(p + 16, e->location);
	put32(p + 24, e->stored_len);
	put32(p + 28, e->raw_len);
	memcpy(p + 32, e->hash, 16);
}

void fmt_decode_entry(const uint8_t *p, entry *e)
{
	e->object = get32(p);
	e->flags = get32(p + 4);
	e->chunk = get64(p + 8);
	e->location = get64(p + 16);
	e->stored_len = get32(p + 24);
	e->raw_len = get32(p + 28);
	memcpy(e->hash, p + 32, 16);
}
