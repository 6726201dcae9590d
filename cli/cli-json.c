/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * phos status --json and phos ls --json (cli.h): phosfs's status.json
 * files, /phos/PID/status.json, as they are (each checked to be JSON),
 * one object, or an array of them.
 */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* pid's status.json (pid: a directory name of the mount). NULL when it
 * cannot be read, said on stderr, or when pid is gone and gone_ok (*gone
 * is then set, and nothing said). */
static json_t *status_of(const char *pid, bool gone_ok, bool *gone)
{
	char path[PATH_MAX], lines[PATH_MAX], dir[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s/status.json", cli_mount(), pid);
	snprintf(lines, sizeof(lines), "%s/%s/status", cli_mount(), pid);
	snprintf(dir, sizeof(dir), "%s/%s", cli_mount(), pid);
	json_error_t je;
	json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	if (j && json_is_object(j))
		return j;
	json_decref(j);
	int e = errno;
	*gone = gone_ok && access(dir, F_OK) && access(cli_mount(), F_OK) == 0;
	if (*gone)
		return NULL;
	if (access(path, F_OK) && !access(lines, F_OK))
		fprintf(stderr, "phos: %s: this phosfs has no status.json (it is older than phos): "
				"use phos status %s, without --json\n", path, pid);
	else if (access(path, F_OK))
		cli_open_failed(path, e, "only root and the owner of the process may see it");
	else
		fprintf(stderr, "phos: %s: not a JSON object: %s (line %d)\n", path, je.text, je.line);
	return NULL;
}

/* Prints j on a line. phos's exit status. */
static int print(json_t *j)
{
	int e = json_dumpf(j, stdout, JSON_PRESERVE_ORDER | JSON_COMPACT) || putchar('\n') == EOF;
	return fflush(stdout) || e ? 1 : 0;
}

int cli_status_json(const char *pid)
{
	bool gone;
	json_t *j = status_of(pid, false, &gone);
	if (!j)
		return 1;
	int r = print(j);
	json_decref(j);
	return r;
}

int cli_ls_json(void)
{
	DIR *d = opendir(cli_mount());
	if (!d) {
		fprintf(stderr, "phos: %s: %s\n", cli_mount(), strerror(errno));
		return 1;
	}
	json_t *all = json_array();
	int r = all ? 0 : 1;
	for (struct dirent *de; !r && (de = readdir(d));) {
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		bool gone = false;
		json_t *j = status_of(de->d_name, true, &gone);
		if (!gone) /* else it went away meanwhile */
			r = !j || json_array_append_new(all, j);
	}
	closedir(d);
	if (!r)
		r = print(all);
	json_decref(all);
	return r;
}
