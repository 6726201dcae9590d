/* The tracer's messages: one line each on stderr, prefixed "phos: ". */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tracer.h"

static void vlog(const char *fmt, va_list ap)
{
	char line[512];
	vsnprintf(line, sizeof(line), fmt, ap);
	fprintf(stderr, "phos: %s\n", line);
}

void tr_log(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
}

void tr_debug(const char *fmt, ...)
{
	static int on = -1;
	if (on < 0) {
		const char *e = getenv("PHOS_DEBUG");
		on = e && strcmp(e, "0") != 0;
	}
	if (!on)
		return;
	va_list ap;
	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
}

bool tr_enabled(void)
{
	static int on = -1;
	if (on < 0) {
		const char *e = getenv("PHOS_TRACE");
		on = !(e && strcmp(e, "0") == 0);
	}
	return on;
}
