/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * /PID/status.json and /status.json are one JSON object each, and say
 * what the key: value status files say: examples/counter under the
 * tracer, running, then after a cow checkpoint (its stall, steps and
 * counters), then restored (the root's restored pid and steps). Only
 * root and the process's owner may read them, as status. Needs root
 * and FUSE.
 */
#include <ctype.h>
#include <jansson.h>

#include "phosfs_test.h"

/* The key of JSON that status.json gives the status key k. */
static void key_of(const char *k, size_t n, char *out, size_t len)
{
	size_t o = 0;
	for (size_t i = 0; i < n && o + 1 < len; i++)
		out[o++] = k[i] == ' ' || k[i] == '-' ? '_' : (char)tolower((unsigned char)k[i]);
	out[o] = 0;
}

/* Each "key: value" line of text whose value is a plain number, or
 * "none", or a word, must be in obj under its key with that value.
 * Returns the number of lines that disagree (said in diag), and how many
 * were compared in *n. */
static int disagree(const char *text, json_t *obj, int *n)
{
	int bad = 0;
	*n = 0;
	for (const char *l = text; *l; l += strcspn(l, "\n") + (l[strcspn(l, "\n")] ? 1 : 0)) {
		size_t len = strcspn(l, "\n");
		const char *colon = strstr(l, ": ");
		if (!colon || colon > l + len)
			continue;
		char key[128], v[256];
		key_of(l, (size_t)(colon - l), key, sizeof(key));
		snprintf(v, sizeof(v), "%.*s", (int)(l + len - colon - 2), colon + 2);
		if (!strcmp(key, "member") || !strcmp(key, "members"))
			continue;
		json_t *j = json_object_get(obj, key);
		char *end;
		double d = strtod(v, &end);
		bool number = end != v && !*end, word = !strchr(v, ' ') && !number;
		if (!number && !word)
			continue;
		(*n)++;
		bool same = !strcmp(v, "none") ? json_is_null(j)
			    : number	       ? json_is_number(j) && json_number_value(j) == d
					       : json_is_string(j) && !strcmp(json_string_value(j), v);
		if (!same) {
			char *js = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
			diag("%s: status says '%s', status.json '%s'", key, v, js ? js : "(none)");
			free(js);
			bad++;
		}
	}
	return bad;
}

/* Reads path's JSON; NULL (with diag) where it is not one object. */
static json_t *load(const char *path)
{
	json_error_t err;
	json_t *j = json_load_file(path, 0, &err);
	if (!j || !json_is_object(j))
		diag("%s: %s (line %d)", path, j ? "not an object" : err.text, err.line);
	if (j && !json_is_object(j)) {
		json_decref(j);
		j = NULL;
	}
	return j;
}

/* Whether "steps ms: A 1.0 B 2.0" of text is obj's steps_ms, step for step. */
static bool same_steps(const char *text, json_t *obj)
{
	const char *l = strstr(text, "steps ms: ");
	json_t *s = json_object_get(obj, "steps_ms");
	if (!l || !json_is_object(s))
		return false;
	char line[1024], *save = NULL;
	snprintf(line, sizeof(line), "%.*s", (int)strcspn(l + 10, "\n"), l + 10);
	size_t n = 0;
	for (char *k = strtok_r(line, " ", &save), *v; k && (v = strtok_r(NULL, " ", &save));
	     k = strtok_r(NULL, " ", &save), n++) {
		char key[64];
		key_of(k, strlen(k), key, sizeof(key));
		if (json_number_value(json_object_get(s, key)) != atof(v))
			return false;
	}
	return n > 0 && n == json_object_size(s);
}

int main(void)
{
	rig r;
	rig_require(&r);
	plan(6);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	pid_t pid = rig_counter(&r, 64);
	char out[160], ctl[160], status[160], js[176], st[8192], last[256];
	rig_out(&r, pid, out, sizeof(out));
	rig_files(&r, pid, ctl, status);
	snprintf(js, sizeof(js), "%s.json", status);
	if (!rig_line(out, "count 3", 20000, NULL, 0) || !rig_traced(&r, pid, 10000))
		bail("the counter did not start");

	int n = 0;
	json_t *j = load(js);
	rig_read(status, st, sizeof(st));
	int bad = j ? disagree(st, j, &n) : -1;
	ok(!bad && n >= 8, "a traced process's status.json says what its status says (%d facts)", n);
	json_t *m = json_object_get(j, "members");
	const char *ml = strstr(st, "members: ");
	size_t traced = 0, nm = json_array_size(m);
	for (size_t i = 0; i < nm; i++) {
		json_t *e = json_array_get(m, i);
		traced += json_integer_value(json_object_get(e, "pid")) == pid &&
			  json_is_string(json_object_get(e, "comm")) &&
			  !strcmp(json_string_value(json_object_get(e, "gpu")) ?: "", "traced");
	}
	ok(json_is_array(m) && ml && nm == (size_t)atoi(ml + 9) && traced == 1,
	   "its members are an array of objects (pid, comm, gpu), as many as status says (%zu), the counter traced", nm);
	json_decref(j);

	if (!rig_checkpoint(&r, pid, "checkpoint cow name=a\n", last, sizeof(last)))
		bail("the checkpoint failed: %s", rig_read(status, st, sizeof(st)) ? st : last);
	j = load(js);
	rig_read(status, st, sizeof(st));
	bad = j ? disagree(st, j, &n) : -1;
	ok(!bad && same_steps(st, j) &&
		   !strcmp(json_string_value(json_object_get(j, "last_checkpoint")) ?: "", "a"),
	   "after a checkpoint it says the same stall, steps and counters as status (%d facts)", n);
	json_t *off = json_object_get(j, "off_gpu"), *sh = json_object_get(j, "cow_shadows");
	ok(json_integer_value(json_object_get(off, "total")) > 0 &&
		   json_integer_value(json_object_get(off, "done")) == json_integer_value(json_object_get(off, "total")) &&
		   json_is_integer(json_object_get(sh, "count")) && json_is_integer(json_object_get(sh, "bytes")),
	   "byte counts are objects of numbers: off_gpu {done, total}, cow_shadows {count, bytes}");
	json_decref(j);

	/* The root's, after a restore. */
	if (!rig_checkpoint(&r, pid, "checkpoint stop name=b kill\n", last, sizeof(last)))
		bail("the stop checkpoint failed: %s", last);
	for (int i = 0; i < 100 && rig_alive(pid); i++)
		usleep(20000);
	rig_reap();
	char image[PATH_MAX], root[160], rootjs[176];
	snprintf(image, sizeof(image), "%s/%d/b", r.store, (int)pid);
	pid_t back = 0;
	if (rig_restore(&r, image, &back, st, sizeof(st)) || !rig_restore_done(&r, 30000, st, sizeof(st)))
		bail("the restore failed: %s", st);
	snprintf(root, sizeof(root), "%s/status", r.mnt);
	snprintf(rootjs, sizeof(rootjs), "%s/status.json", r.mnt);
	j = load(rootjs);
	rig_read(root, st, sizeof(st));
	bad = j ? disagree(st, j, &n) : -1;
	ok(!bad && json_integer_value(json_object_get(j, "restored_pid")) == back &&
		   same_steps(st, j),
	   "/status.json says what /status says after a restore: restored pid %d, its steps (%d facts)", (int)back, n);
	json_decref(j);

	/* As status: the owner and root only. */
	pid_t c = fork();
	if (c == 0) {
		if (setgid(65534) || setuid(65534))
			_exit(2);
		_exit(open(rootjs, O_RDONLY) < 0 && errno == EACCES ? 0 : 1);
	}
	int ws = 0;
	waitpid(c, &ws, 0);
	ok(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "another user may not read /status.json");
	kill(back, SIGKILL);
	rig_reap();
	rig_cleanup(&r);
	return done();
}
