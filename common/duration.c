/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A duration as people write one (duration.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "duration.h"

int duration_parse(const char *s, double *out)
{
	char *end = NULL;
	errno = 0;
	double v = strtod(s, &end);
	double unit = !*end		    ? 1
		      : !strcmp(end, "s") ? 1
		      : !strcmp(end, "m") ? 60
		      : !strcmp(end, "h") ? 3600
		      : !strcmp(end, "d") ? 86400
					  : 0;
	v *= unit;
	if (end == s || errno || !unit || !(v >= DURATION_MIN_S) || !(v <= DURATION_MAX_S))
		return -EINVAL;
	*out = v;
	return 0;
}
