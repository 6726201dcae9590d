/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A duration as people write one (duration.c): seconds, or a number with
 * s, m, h or d ("90", "1.5s", "15m", "2h", "1d"). phosfs's schedule and
 * phos run's --checkpoint-every and --mtbf read the same words.
 */
#ifndef PHOS_COMMON_DURATION_H
#define PHOS_COMMON_DURATION_H

#define DURATION_MIN_S 1.0
#define DURATION_MAX_S (365 * 86400.0)

/* s into *out, in seconds, from DURATION_MIN_S to DURATION_MAX_S.
 * Returns 0, or -EINVAL (not a duration, or out of that range). */
int duration_parse(const char *s, double *out);

#endif
