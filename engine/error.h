/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * One way to report an error inside phos (error.c), after CRIU's pr_err
 * and pr_perror.
 *
 * Where a function fails for a reason a person should read, it says so
 * with pr_err (or pr_perror, which adds the errno's words): a sentence
 * that names the cause and the thing it concerns, without the trailing
 * period ("criu dump failed: …"). The message travels in a perr from
 * there to whoever reports it: a job's status (job_shared.err), phosfs's
 * status files and syslog, the phos CLI, a ctl write's error. Where a log
 * is set (pr_log_to), each one is also logged as it happens, with the
 * function that made it.
 *
 * The image library keeps its own (phosimg_last_error), and so does the
 * tracer, which runs inside the application (tr_log): pr_img carries the
 * library's into a perr.
 */
#ifndef PHOS_ENGINE_ERROR_H
#define PHOS_ENGINE_ERROR_H

#include <stddef.h>

#define PERR_MAX 512

/* An error on its way: its message, "" while there is none. */
typedef struct perr {
	int code;           /* a negative errno, 0 while there is none */
	char msg[PERR_MAX]; /* a sentence without the trailing period */
} perr;

/* Makes er (if not NULL) say fmt's message, logs it with where, and
 * returns code. */
int pr_fail(perr *er, int code, const char *where, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* pr_err(er, code, fmt, …): er says the message; returns code. */
#define pr_err(er, code, ...) pr_fail((er), (code), __func__, __VA_ARGS__)

/* pr_perror(er, code, fmt, …): as pr_err, with ": " and strerror(-code)
 * after the message. */
#define pr_perror(er, code, ...) pr_fail_errno((er), (code), __func__, __VA_ARGS__)
int pr_fail_errno(perr *er, int code, const char *where, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* pr_img(er, code, fmt, …): as pr_err, with ": " and the image library's
 * last error (or strerror(-code) when it has none) after the message. */
#define pr_img(er, code, ...) pr_fail_img((er), (code), __func__, __VA_ARGS__)
int pr_fail_img(perr *er, int code, const char *where, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Copies src's error into er (if not NULL); returns its code. */
int pr_copy(perr *er, const perr *src);

/* Adds fmt's words at the end of er's message (nothing if it has none). */
void pr_append(perr *er, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* er's message, or the words of its code when it has none, or "". */
const char *pr_msg(const perr *er);

/* Logs every error from now on, with its place, through log (NULL: none,
 * the default). */
void pr_log_to(void (*log)(const char *where, const char *msg));

#endif
