/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * status.json (phosfs.h: status_json): a status file's key: value lines
 * as one JSON object, so that the two always say the same.
 *
 * Each line "key words: value" becomes "key_words": value, where a value
 * is, by its shape:
 *   none                          null
 *   12, 0.5                       a number
 *   3/7 bytes                     {"done": 3, "total": 7}
 *   park 2.0 driver-restore 3.1   {"park": 2.0, "driver_restore": 3.1}
 *   12 written, 4 shared          {"written": 12, "shared": 4}
 *   2 (512 bytes)                 {"count": 2, "bytes": 512}
 *   anything else                 a string
 * with a note in parentheses after a number or pairs kept as "note" (and
 * left out after a lone number). The values of names and messages (error,
 * job, last checkpoint, log, …: is_text) are strings, or null for none. A key given more than once becomes an
 * array; "member" lines become "members", [{"pid", "comm", "gpu"}] (their
 * number, "members: N", is its length), and
 * /status's "restore ID" lines "pending", [{"id", "state", "job"}].
 */
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "phosfs.h"

#define TOKENS_MAX 64

/* A number of JSON (an integer where it has no point), or NULL where s
 * is not one. */
static json_t *number(const char *s)
{
	if (!*s || (!isdigit((unsigned char)*s) && *s != '-'))
		return NULL;
	char *end;
	if (!strpbrk(s, ".eE")) {
		errno = 0;
		long long v = strtoll(s, &end, 10);
		return !*end && !errno ? json_integer(v) : NULL;
	}
	double d = strtod(s, &end);
	return !*end ? json_real(d) : NULL;
}

/* A key of JSON: lower case, blanks and dashes as '_'. */
static void key_of(const char *s, size_t n, char *out, size_t len)
{
	size_t k = 0;
	for (size_t i = 0; i < n && k + 1 < len; i++)
		out[k++] = s[i] == ' ' || s[i] == '-' ? '_' : (char)tolower((unsigned char)s[i]);
	out[k] = 0;
}

/* Splits s (modified) at blanks and commas into at most TOKENS_MAX
 * tokens; their number, or -1 for more. */
static int tokens(char *s, char **tok)
{
	int n = 0;
	for (char *save = NULL, *t = strtok_r(s, " ,", &save); t; t = strtok_r(NULL, " ,", &save)) {
		if (n == TOKENS_MAX)
			return -1;
		tok[n++] = t;
	}
	return n;
}

/* Pairs of words and a number ("park 2.0 lock 3", words joined by '_'),
 * or of a number and a word ("12 written, 4 shared"), into obj; false
 * where s has neither shape. */
static bool pairs(char *s, json_t *into)
{
	char *tok[TOKENS_MAX], key[128];
	int n = tokens(s, tok);
	if (n < 2)
		return false;
	json_t *obj = json_object();
	json_t *first = number(tok[0]);
	bool num_first = first != NULL;
	json_decref(first);
	for (int i = 0; i < n;) {
		json_t *v = NULL;
		if (num_first) {
			if (i + 1 >= n || !(v = number(tok[i])))
				break;
			key_of(tok[i + 1], strlen(tok[i + 1]), key, sizeof(key));
			i += 2;
		} else {
			int w = i;
			while (w < n && !(v = number(tok[w])))
				w++;
			if (w == i || !v) {
				json_decref(v);
				v = NULL;
				break;
			}
			size_t len = 0;
			for (int k = i; k < w && len + 1 < sizeof(key); k++)
				len += (size_t)snprintf(key + len, sizeof(key) - len, "%s%s", k > i ? "_" : "", tok[k]);
			key_of(key, strlen(key), key, sizeof(key));
			i = w + 1;
		}
		json_object_set_new(obj, key, v);
		if (i >= n) {
			json_object_update(into, obj);
			json_decref(obj);
			return true;
		}
	}
	json_decref(obj);
	return false;
}

/* A value of JSON for the text v (modified), as the header says. */
static json_t *value(char *v)
{
	if (!strcmp(v, "none"))
		return json_null();
	json_t *num = number(v);
	if (num)
		return num;
	unsigned long long done, total;
	int end = 0;
	if (sscanf(v, "%llu/%llu bytes%n", &done, &total, &end) == 2 && !v[end])
		return json_pack("{s:I,s:I}", "done", (json_int_t)done, "total", (json_int_t)total);
	char orig[1024], note_copy[512];
	snprintf(orig, sizeof(orig), "%s", v);
	char *note = NULL, *open = strchr(v, '(');
	size_t l = strlen(v);
	if (open && open > v && v[l - 1] == ')') {
		open[open[-1] == ' ' ? -1 : 0] = 0;
		v[l - 1] = 0;
		note = open + 1;
	}
	snprintf(note_copy, sizeof(note_copy), "%s", note ? note : "");
	json_t *obj = json_object();
	if ((num = number(v))) {
		/* "2 (512 bytes)": a count and its amount; else the number. */
		if (!note || !pairs(note, obj) || !json_object_size(obj)) {
			json_decref(obj);
			return num;
		}
		json_object_set_new(obj, "count", num);
		return obj;
	}
	char main_copy[1024];
	snprintf(main_copy, sizeof(main_copy), "%s", v);
	if (pairs(main_copy, obj)) {
		if (note && !pairs(note, obj))
			json_object_set_new(obj, "note", text_json(note_copy));
		return obj;
	}
	json_decref(obj);
	return text_json(orig);
}

/* Sets key in obj to v, making an array of a key given again. */
static void set(json_t *obj, const char *key, json_t *v)
{
	json_t *old = json_object_get(obj, key);
	if (!old) {
		json_object_set_new(obj, key, v);
	} else if (json_is_array(old)) {
		json_array_append_new(old, v);
	} else {
		json_t *a = json_array();
		json_array_append(a, old);
		json_array_append_new(a, v);
		json_object_set_new(obj, key, a);
	}
}

/* The lines whose key says more than a name: members and pending
 * restores. True when line was one (and is in obj). */
static bool special(json_t *obj, const char *key, size_t klen, const char *v)
{
	int pid, id, at = 0;
	char comm[64], gpu[32], state[32];
	if (klen == 7 && !strncmp(key, "members", 7)) {
		/* Their number: the array's length. */
		if (!json_object_get(obj, "members"))
			json_object_set_new(obj, "members", json_array());
		return true;
	}
	const char *g = klen == 6 && !strncmp(key, "member", 6) ? strrchr(v, ' ') : NULL;
	int at0 = 0;
	/* "PID COMM gpu=G", the comm's blanks and all: read from both ends. */
	if (g && !strncmp(g, " gpu=", 5) && sscanf(v, "%d %n", &pid, &at0) == 1 && at0 && v + at0 <= g) {
		snprintf(comm, sizeof(comm), "%.*s", (int)(g - v - at0), v + at0);
		snprintf(gpu, sizeof(gpu), "%s", g + 5);
		json_t *a = json_object_get(obj, "members");
		if (!a)
			json_object_set_new(obj, "members", a = json_array());
		json_array_append_new(a, json_pack("{s:i,s:o,s:s}", "pid", pid, "comm", text_json(comm), "gpu", gpu));
		return true;
	}
	if (klen > 8 && !strncmp(key, "restore ", 8) && sscanf(key + 8, "%d", &id) == 1 &&
	    sscanf(v, "%31s %n", state, &at) == 1) {
		json_t *a = json_object_get(obj, "pending");
		if (!a)
			json_object_set_new(obj, "pending", a = json_array());
		json_array_append_new(a, json_pack("{s:i,s:s,s:s}", "id", id, "state", state, "job", v + at));
		return true;
	}
	return false;
}

/* Keys whose values are words, whatever their shape: a name, a
 * message. */
static bool is_text(const char *key)
{
	static const char *const keys[] = { "error",	 "job",	      "last_job", "last_checkpoint",
					    "log",	 "nccl_cut",  "moved_gpus", "checkpoint_interval_why",
					    "stop_only", "traced",    "state",	    "protocol",
					    "step",	 "cpu_pages", "restore" };
	for (size_t i = 0; i < sizeof(keys) / sizeof(*keys); i++)
		if (!strcmp(key, keys[i]))
			return true;
	return false;
}

int status_json(const char *s, size_t len, text *out)
{
	json_t *obj = json_object();
	if (!obj)
		return -ENOMEM;
	for (size_t at = 0; at < len;) {
		const char *nl = memchr(s + at, '\n', len - at);
		size_t n = nl ? (size_t)(nl - s - at) : len - at;
		char line[2048];
		snprintf(line, sizeof(line), "%.*s", (int)n, s + at);
		at += n + 1;
		char *colon = strstr(line, ": ");
		if (!colon)
			continue;
		size_t klen = (size_t)(colon - line);
		if (special(obj, line, klen, colon + 2))
			continue;
		char key[128];
		key_of(line, klen, key, sizeof(key));
		const char *v = colon + 2;
		set(obj, key, !is_text(key) ? value(colon + 2) : !strcmp(v, "none") ? json_null() : text_json(v));
	}
	char *js = json_dumps(obj, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
	json_decref(obj);
	if (!js)
		return -ENOMEM;
	text_add(out, "%s\n", js);
	free(js);
	return out->oom ? -ENOMEM : 0;
}
