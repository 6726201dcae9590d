/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A small TAP producer for phos's C tests, read by prove.
 *
 *   plan(n); ok(cond, "what"); ... return done();
 *   skip_all("no FUSE");    exits 0 with "1..0 # SKIP no FUSE"
 *   bail("reason");         "Bail out!", runs tap_on_bail (a test's
 *                           clean-up, if it set one), exits 255
 */
#ifndef PHOS_TAP_H
#define PHOS_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int tap_planned, tap_run, tap_failed;
/* What bail runs before it exits: takes down what the test set up (a
 * mount, a daemon) so that nothing outlives it. */
static void (*tap_on_bail)(void);

static inline void plan(int n)
{
	tap_planned = n;
	printf("1..%d\n", n);
	fflush(stdout);
}

__attribute__((format(printf, 2, 3))) static inline int ok(int cond, const char *fmt, ...)
{
	va_list ap;
	tap_run++;
	if (!cond)
		tap_failed++;
	printf("%sok %d - ", cond ? "" : "not ", tap_run);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	return cond;
}

__attribute__((format(printf, 1, 2))) static inline void diag(const char *fmt, ...)
{
	va_list ap;
	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

static inline void skip(const char *reason)
{
	tap_run++;
	printf("ok %d # skip %s\n", tap_run, reason);
	fflush(stdout);
}

__attribute__((noreturn)) static inline void skip_all(const char *reason)
{
	printf("1..0 # SKIP %s\n", reason);
	fflush(stdout);
	exit(0);
}

__attribute__((noreturn, format(printf, 1, 2))) static inline void bail(const char *fmt, ...)
{
	va_list ap;
	printf("Bail out! ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (tap_on_bail)
		tap_on_bail();
	exit(255);
}

static inline int done(void)
{
	if (tap_planned != tap_run)
		diag("planned %d tests but ran %d", tap_planned, tap_run);
	return (tap_failed || tap_planned != tap_run) ? 1 : 0;
}

#endif
