/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * One way to report an error (error.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../image-format/phosimg.h"
#include "error.h"

static void (*logger)(const char *where, const char *msg);

void pr_log_to(void (*log)(const char *where, const char *msg))
{
	logger = log;
}

/* er says fmt's message, then tail (if not NULL) after ": ". */
static int fail(perr *er, int code, const char *where, const char *tail, const char *fmt, va_list ap)
{
	perr tmp;
	perr *p = er ? er : &tmp;
	int n = vsnprintf(p->msg, sizeof(p->msg), fmt, ap);
	if (tail && n >= 0 && (size_t)n < sizeof(p->msg))
		snprintf(p->msg + n, sizeof(p->msg) - (size_t)n, ": %s", tail);
	p->code = code;
	if (logger)
		logger(where, p->msg);
	return code;
}

int pr_fail(perr *er, int code, const char *where, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fail(er, code, where, NULL, fmt, ap);
	va_end(ap);
	return code;
}

int pr_fail_errno(perr *er, int code, const char *where, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fail(er, code, where, strerror(code < 0 ? -code : code), fmt, ap);
	va_end(ap);
	return code;
}

int pr_fail_img(perr *er, int code, const char *where, const char *fmt, ...)
{
	const char *why = phosimg_last_error();
	va_list ap;
	va_start(ap, fmt);
	fail(er, code, where, why && *why ? why : strerror(code < 0 ? -code : code), fmt, ap);
	va_end(ap);
	return code;
}

int pr_copy(perr *er, const perr *src)
{
	if (er && er != src)
		*er = *src;
	return src->code;
}

void pr_append(perr *er, const char *fmt, ...)
{
	if (!er || !*er->msg)
		return;
	size_t len = strlen(er->msg);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(er->msg + len, sizeof(er->msg) - len, fmt, ap);
	va_end(ap);
}

const char *pr_msg(const perr *er)
{
	if (*er->msg)
		return er->msg;
	return er->code ? strerror(-er->code) : "";
}
