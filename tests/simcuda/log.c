/* SPDX-License-Identifier: GPL-2.0-only */
/* Logging, and the answer to calls simcuda does not implement. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void sc_log(const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* One write per line, so lines of several threads stay whole. */
	fprintf(stderr, "simcuda: %s\n", line);
}

CUresult sc_unsupported(const char *call)
{
	sc_log("%s is not implemented: returning CUDA_ERROR_NOT_SUPPORTED", call);
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* Called by every generated stub (stubs.c) for a driver entry point that
 * simcuda does not implement. */
SC_EXPORT CUresult simcuda_unimplemented(const char *call);
CUresult simcuda_unimplemented(const char *call)
{
	return sc_unsupported(call);
}
