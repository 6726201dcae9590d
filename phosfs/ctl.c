/* SPDX-License-Identifier: GPL-2.0-only */
/* The ctl grammar (ctl.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/duration.h"
#include "../job/request.h"
#include "../job/restore.h"
#include "ctl.h"

bool ctl_name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > CTL_NAME_MAX || s[0] == '.' || !strcmp(s, "latest"))
		return false;
	return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

#define CTL_WORDS 8

/* Copies buf (len bytes, one trailing newline allowed) into line and
 * splits it at blanks into words (up to CTL_WORDS); *n of them. */
static int split(const char *buf, size_t len, char *line, char **words, int *n, perr *er)
{
	if (len == 0)
		return pr_err(er, -EINVAL, "empty command");
	if (len > CTL_MAX)
		return pr_err(er, -EINVAL, "command longer than %d bytes", CTL_MAX);
	memcpy(line, buf, len);
	if (line[len - 1] == '\n')
		len--;
	line[len] = 0;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)line[i] < 0x20 && line[i] != '\t')
			return pr_err(er, -EINVAL, "control character 0x%02x at byte %zu (one command per write)",
				      (unsigned char)line[i], i);
		else if ((unsigned char)line[i] == 0x7f)
			return pr_err(er, -EINVAL, "control character 0x7f at byte %zu", i);
	*n = 0;
	for (char *save = NULL, *w = strtok_r(line, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
		if (*n == CTL_WORDS)
			return pr_err(er, -EINVAL, "too many words");
		words[(*n)++] = w;
	}
	return *n ? 0 : pr_err(er, -EINVAL, "empty command");
}

/* restore DIR [eager|lazy] [lazy-pages] [growing] [device=OLD=NEW,…] */
static int parse_restore(char **words, int n, ctl_cmd *out, perr *er)
{
	if (strcmp(words[0], "restore"))
		return pr_err(er, -EINVAL,
			      "unknown command '%.40s' (expected: restore DIR [eager|lazy] [lazy-pages] [device=OLD=NEW,…])",
			      words[0]);
	if (n < 2)
		return pr_err(er, -EINVAL, "restore needs a directory");
	if (words[1][0] != '/')
		return pr_err(er, -EINVAL, "restore needs an absolute path, not '%.200s'", words[1]);
	bool mode = false;
	out->lazy = true; /* the default */
	for (int i = 2; i < n; i++) {
		const char *w = words[i];
		if (!strcmp(w, "eager") || !strcmp(w, "lazy")) {
			if (mode)
				return pr_err(er, -EINVAL, "more than one restore mode");
			mode = true;
			out->lazy = !strcmp(w, "lazy");
		} else if (!strcmp(w, "growing")) {
			if (out->growing)
				return pr_err(er, -EINVAL, "growing given twice");
			out->growing = true;
		} else if (!strcmp(w, "lazy-pages")) {
			if (out->lazy_pages)
				return pr_err(er, -EINVAL, "lazy-pages given twice");
			out->lazy_pages = true;
		} else if (!strncmp(w, "device=", 7)) {
			if (*out->devices)
				return pr_err(er, -EINVAL, "device= given twice (list every move in one: device=0=1,1=0)");
			if (restore_devices_check(w + 7, er))
				return -EINVAL;
			snprintf(out->devices, sizeof(out->devices), "%s", w + 7);
		} else {
			return pr_err(er, -EINVAL,
				      "unknown word '%.40s' after restore DIR (expected: eager, lazy, lazy-pages, growing, device=OLD=NEW,…)",
				      w);
		}
	}
	out->verb = CTL_RESTORE;
	snprintf(out->dir, sizeof(out->dir), "%s", words[1]);
	return 0;
}

int ctl_timeout(const char *w, uint32_t *ms, perr *er)
{
	char *end = NULL;
	errno = 0;
	double s = strtod(w, &end);
	if (end == w || *end || errno || !(s * 1000 >= 1) || !(s * 1000 <= JOB_TIMEOUT_MAX_MS))
		return pr_err(er, -EINVAL, "bad timeout '%.40s' (seconds, from 0.001 to %u)", w,
			      JOB_TIMEOUT_MAX_MS / 1000);
	*ms = (uint32_t)(s * 1000 + 0.5);
	return 0;
}

int ctl_duration(const char *w, double *s, perr *er)
{
	if (duration_parse(w, s))
		return pr_err(er, -EINVAL, "bad duration '%.40s' (seconds, or a number with s, m, h or d; 1 s to 365 d)", w);
	return 0;
}

/* The protocol word w, or CTL_DEFAULT. */
static enum ctl_proto proto_of(const char *w)
{
	return !strcmp(w, "cow") ? CTL_COW : !strcmp(w, "recopy") ? CTL_RECOPY : !strcmp(w, "stop") ? CTL_STOP : CTL_DEFAULT;
}

/* schedule every=DURATION|auto [mtbf=DURATION] [keep=N] [PROTOCOL], or
 * schedule off */
static int parse_schedule(char **words, int n, ctl_cmd *out, perr *er)
{
	out->verb = CTL_SCHEDULE;
	if (n == 2 && !strcmp(words[1], "off"))
		return out->off = true, 0;
	bool every = false;
	for (int i = 1; i < n; i++) {
		const char *w = words[i];
		enum ctl_proto p = proto_of(w);
		char *end;
		if (p && !out->proto) {
			out->proto = p;
		} else if (!strncmp(w, "every=", 6) && !every) {
			every = true;
			if (strcmp(w + 6, "auto") && ctl_duration(w + 6, &out->every_s, er))
				return -EINVAL;
		} else if (!strncmp(w, "mtbf=", 5) && !out->mtbf_s) {
			if (ctl_duration(w + 5, &out->mtbf_s, er))
				return -EINVAL;
		} else if (!strncmp(w, "keep=", 5) && !out->keep) {
			unsigned long k = strtoul(w + 5, &end, 10);
			if (*end || w[5] < '1' || w[5] > '9' || k > 100000)
				return pr_err(er, -EINVAL, "bad keep '%.40s' (1 to 100000 checkpoints)", w + 5);
			out->keep = (unsigned)k;
		} else {
			return pr_err(er, -EINVAL,
				      "unknown or repeated word '%.40s' (expected: schedule every=DURATION|auto "
				      "[mtbf=DURATION] [keep=N] [cow|recopy|stop], or schedule off)",
				      w);
		}
	}
	if (!every)
		return pr_err(er, -EINVAL, "schedule needs every=DURATION or every=auto (or: schedule off)");
	if (out->mtbf_s && out->every_s)
		return pr_err(er, -EINVAL, "mtbf= is for every=auto, whose interval it sets");
	return 0;
}

/* release kill|resume */
static int parse_release(char **words, int n, ctl_cmd *out, perr *er)
{
	if (n != 2 || (strcmp(words[1], "kill") && strcmp(words[1], "resume")))
		return pr_err(er, -EINVAL, "release needs one word: kill (the held processes end) or resume (they run on)");
	out->verb = CTL_RELEASE;
	out->release_kill = !strcmp(words[1], "kill");
	return 0;
}

/* checkpoint [cow|recopy|stop] [name=NAME] [kill|hold=SECONDS]
 * [timeout=SECONDS], or cancel, or release …, or schedule … */
static int parse_checkpoint(char **words, int n, ctl_cmd *out, perr *er)
{
	if (!strcmp(words[0], "cancel")) {
		if (n > 1)
			return pr_err(er, -EINVAL, "cancel takes no arguments");
		out->verb = CTL_CANCEL;
		return 0;
	}
	if (!strcmp(words[0], "schedule"))
		return parse_schedule(words, n, out, er);
	if (!strcmp(words[0], "release"))
		return parse_release(words, n, out, er);
	if (strcmp(words[0], "checkpoint"))
		return pr_err(er, -EINVAL, "unknown command '%.40s' (expected: checkpoint, cancel, release or schedule)",
			      words[0]);
	out->verb = CTL_CHECKPOINT;
	bool named = false;
	for (int i = 1; i < n; i++) {
		const char *w = words[i];
		enum ctl_proto p = proto_of(w);
		if (p) {
			if (out->proto)
				return pr_err(er, -EINVAL, "more than one protocol");
			out->proto = p;
		} else if (!strcmp(w, "kill")) {
			if (out->kill)
				return pr_err(er, -EINVAL, "kill given twice");
			out->kill = true;
		} else if (!strncmp(w, "hold=", 5)) {
			if (out->hold_ms)
				return pr_err(er, -EINVAL, "hold given twice");
			if (ctl_timeout(w + 5, &out->hold_ms, er))
				return -EINVAL;
		} else if (!strncmp(w, "timeout=", 8)) {
			if (out->timeout_ms)
				return pr_err(er, -EINVAL, "timeout given twice");
			if (ctl_timeout(w + 8, &out->timeout_ms, er))
				return -EINVAL;
		} else if (!strncmp(w, "name=", 5)) {
			if (named)
				return pr_err(er, -EINVAL, "name given twice");
			if (!ctl_name_ok(w + 5))
				return pr_err(er, -EINVAL,
					      "bad name '%.70s' (1 to 64 of A-Z a-z 0-9 . _ -, not starting with '.', not 'latest')",
					      w + 5);
			snprintf(out->name, sizeof(out->name), "%s", w + 5);
			named = true;
		} else {
			return pr_err(er, -EINVAL,
				      "unknown word '%.40s' (expected: cow, recopy, stop, name=NAME, kill, hold=SECONDS, timeout=SECONDS)",
				      w);
		}
	}
	if (out->kill && out->hold_ms)
		return pr_err(er, -EINVAL, "kill and hold= together: a held checkpoint's release says whether it ends (release kill)");
	return 0;
}

int ctl_parse(const char *buf, size_t len, bool root, ctl_cmd *out, perr *er)
{
	char line[CTL_MAX + 1];
	char *words[CTL_WORDS];
	int n = 0;
	memset(out, 0, sizeof(*out));
	int e = split(buf, len, line, words, &n, er);
	if (e)
		return e;
	return root ? parse_restore(words, n, out, er) : parse_checkpoint(words, n, out, er);
}
