/* The ctl grammar (ctl.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../job/restore.h"
#include "ctl.h"

static int bad(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

bool ctl_name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > CTL_NAME_MAX || s[0] == '.' || !strcmp(s, "latest"))
		return false;
	return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

int ctl_parse(const char *buf, size_t len, bool root, ctl_cmd *out, char *err, size_t errlen)
{
	char line[CTL_MAX + 1];
	memset(out, 0, sizeof(*out));
	if (len == 0)
		return bad(err, errlen, "empty command");
	if (len > CTL_MAX)
		return bad(err, errlen, "command longer than %d bytes", CTL_MAX);
	memcpy(line, buf, len);
	if (line[len - 1] == '\n')
		len--;
	line[len] = 0;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)line[i] < 0x20 && line[i] != '\t')
			return bad(err, errlen, "control character 0x%02x at byte %zu (one command per write)",
				   (unsigned char)line[i], i);
		else if ((unsigned char)line[i] == 0x7f)
			return bad(err, errlen, "control character 0x7f at byte %zu", i);
	char *words[8];
	int n = 0;
	for (char *save = NULL, *w = strtok_r(line, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
		if (n == 8)
			return bad(err, errlen, "too many words");
		words[n++] = w;
	}
	if (n == 0)
		return bad(err, errlen, "empty command");
	if (root) {
		if (strcmp(words[0], "restore"))
			return bad(err, errlen,
				   "unknown command '%.40s' (expected: restore DIR [eager|lazy] [lazy-pages] [device=OLD=NEW,…])",
				   words[0]);
		if (n < 2)
			return bad(err, errlen, "restore needs a directory");
		if (words[1][0] != '/')
			return bad(err, errlen, "restore needs an absolute path, not '%.200s'", words[1]);
		bool mode = false;
		out->lazy = true; /* the default */
		for (int i = 2; i < n; i++) {
			const char *w = words[i];
			if (!strcmp(w, "eager") || !strcmp(w, "lazy")) {
				if (mode)
					return bad(err, errlen, "more than one restore mode");
				mode = true;
				out->lazy = !strcmp(w, "lazy");
			} else if (!strcmp(w, "lazy-pages")) {
				if (out->lazy_pages)
					return bad(err, errlen, "lazy-pages given twice");
				out->lazy_pages = true;
			} else if (!strncmp(w, "device=", 7)) {
				if (*out->devices)
					return bad(err, errlen, "device= given twice (list every move in one: device=0=1,1=0)");
				if (restore_devices_check(w + 7, err, errlen))
					return -EINVAL;
				snprintf(out->devices, sizeof(out->devices), "%s", w + 7);
			} else {
				return bad(err, errlen, "unknown word '%.40s' after restore DIR (expected: eager, lazy, lazy-pages, device=OLD=NEW,…)", w);
			}
		}
		out->verb = CTL_RESTORE;
		snprintf(out->dir, sizeof(out->dir), "%s", words[1]);
		return 0;
	}
	if (!strcmp(words[0], "cancel")) {
		if (n > 1)
			return bad(err, errlen, "cancel takes no arguments");
		out->verb = CTL_CANCEL;
		return 0;
	}
	if (strcmp(words[0], "checkpoint"))
		return bad(err, errlen, "unknown command '%.40s' (expected: checkpoint or cancel)", words[0]);
	out->verb = CTL_CHECKPOINT;
	bool named = false;
	for (int i = 1; i < n; i++) {
		const char *w = words[i];
		enum ctl_proto p = !strcmp(w, "cow") ? CTL_COW : !strcmp(w, "recopy") ? CTL_RECOPY
							       : !strcmp(w, "stop")   ? CTL_STOP
										      : CTL_DEFAULT;
		if (p) {
			if (out->proto)
				return bad(err, errlen, "more than one protocol");
			out->proto = p;
		} else if (!strcmp(w, "kill")) {
			if (out->kill)
				return bad(err, errlen, "kill given twice");
			out->kill = true;
		} else if (!strncmp(w, "name=", 5)) {
			if (named)
				return bad(err, errlen, "name given twice");
			if (!ctl_name_ok(w + 5))
				return bad(err, errlen,
					   "bad name '%.70s' (1 to 64 of A-Z a-z 0-9 . _ -, not starting with '.', not 'latest')",
					   w + 5);
			snprintf(out->name, sizeof(out->name), "%s", w + 5);
			named = true;
		} else {
			return bad(err, errlen, "unknown word '%.40s' (expected: cow, recopy, stop, name=NAME, kill)", w);
		}
	}
	return 0;
}
