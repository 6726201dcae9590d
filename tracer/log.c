/* SPDX-License-Identifier: LGPL-2.1-or-later */
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

bool tr_env_on(const char *name, bool unset)
{
	const char *e = getenv(name);
	return e ? strcmp(e, "0") != 0 : unset;
}

void tr_debug(const char *fmt, ...)
{
	static int on = -1;
	if (on < 0)
		on = tr_env_on("PHOS_DEBUG", false);
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
	if (on < 0)
		on = tr_env_on("PHOS_TRACE", true);
	return on;
}

/* With PHOS_DEBUG=1, what the tracer saw, when the process exits. */
__attribute__((destructor)) static void summary(void)
{
	if (!tr_env_on("PHOS_DEBUG", false) || !tr_enabled())
		return;
	uint64_t bufs, objs, bytes, kernels, layouts, launches;
	alloc_stats(&bufs, &objs, &bytes);
	module_stats(&kernels, &layouts, &launches);
	tr_log("%llu calls passed the gate; %llu allocations live in %llu VMM objects (%llu bytes); %llu kernels "
	       "launched or looked up, %llu with a parameter layout; %llu launches",
	       (unsigned long long)gate_passed(), (unsigned long long)bufs, (unsigned long long)objs,
	       (unsigned long long)bytes, (unsigned long long)kernels, (unsigned long long)layouts,
	       (unsigned long long)launches);
}
