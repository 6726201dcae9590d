/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Cgroups (cgroup.h): /proc/PID/cgroup names a process's cgroup in each
 * hierarchy ("ID:CONTROLLERS:PATH", "0::PATH" for cgroup v2);
 * /proc/self/mountinfo says where each hierarchy is mounted here. A
 * process joins a cgroup by writing 0 (itself) to its cgroup.procs.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cgroup.h"

int engine_cgroups_read(pid_t pid, char *text, size_t len)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? -ESRCH : -errno;
	size_t n = fread(text, 1, len - 1, f);
	int e = ferror(f) ? -EIO : fgetc(f) != EOF ? -E2BIG : 0;
	fclose(f);
	text[n] = 0;
	return e;
}

/* Undoes mountinfo's octal escapes (\040 for a space) in s, in place. */
static void unescape(char *s)
{
	char *o = s;
	for (char *i = s; *i; o++) {
		if (i[0] == '\\' && i[1] >= '0' && i[1] <= '3' && i[2] >= '0' && i[2] <= '7' && i[3] >= '0' &&
		    i[3] <= '7') {
			*o = (char)((i[1] - '0') * 64 + (i[2] - '0') * 8 + (i[3] - '0'));
			i += 4;
		} else {
			*o = *i++;
		}
	}
	*o = 0;
}

/* Whether the comma-separated list has word w (wlen bytes). */
static bool has_word(const char *list, const char *w, size_t wlen)
{
	for (const char *p = list; *p;) {
		size_t n = strcspn(p, ",");
		if (n == wlen && !strncmp(p, w, n))
			return true;
		p += n + (p[n] == ',');
	}
	return false;
}

/* Whether a mount of type fstype with super options opts holds the
 * hierarchy of controllers ("" for cgroup v2). */
static bool holds(const char *fstype, const char *opts, const char *controllers)
{
	if (!*controllers)
		return !strcmp(fstype, "cgroup2");
	if (strcmp(fstype, "cgroup"))
		return false;
	for (const char *c = controllers; *c;) {
		size_t n = strcspn(c, ",");
		if (!has_word(opts, c, n))
			return false;
		c += n + (c[n] == ',');
	}
	return true;
}

/* Where, in this mount namespace, the cgroup at cg (its hierarchy's
 * controllers) is: its cgroup.procs into out (len bytes). 1 when found,
 * 0 when no mount here reaches it, or -ENAMETOOLONG. */
static int locate(FILE *mi, const char *controllers, const char *cg, char *out, size_t len)
{
	char line[4096];
	rewind(mi);
	while (fgets(line, sizeof(line), mi)) {
		/* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER */
		char root[1024], point[1024], fstype[64], opts[1024];
		char *dash = strstr(line, " - ");
		if (!dash || sscanf(line, "%*s %*s %*s %1023s %1023s", root, point) != 2 ||
		    sscanf(dash + 3, "%63s %*s %1023s", fstype, opts) != 2 || !holds(fstype, opts, controllers))
			continue;
		unescape(root);
		unescape(point);
		size_t rl = strcmp(root, "/") ? strlen(root) : 0;
		if (strncmp(cg, root, rl) || (cg[rl] && cg[rl] != '/'))
			continue; /* this mount shows another part of the hierarchy */
		const char *rest = cg + rl;
		if (!strcmp(rest, "/"))
			rest = "";
		if (snprintf(out, len, "%s%s/cgroup.procs", point, rest) >= (int)len)
			return -ENAMETOOLONG;
		return 1;
	}
	return 0;
}

/* Whether path has a ".." component. */
static bool up_a_level(const char *path)
{
	for (const char *p = strstr(path, ".."); p; p = strstr(p + 1, ".."))
		if ((p == path || p[-1] == '/') && (!p[2] || p[2] == '/'))
			return true;
	return false;
}

int engine_cgroups_resolve(const char *text, engine_cgroups *cg, perr *er)
{
	cg->n = 0;
	FILE *mi = fopen("/proc/self/mountinfo", "re");
	if (!mi)
		return pr_perror(er, -errno, "cannot read /proc/self/mountinfo");
	size_t used = 0;
	int e = 0;
	for (const char *l = text; !e && *l;) {
		size_t n = strcspn(l, "\n");
		char line[1024], *c1, *c2;
		if (n >= sizeof(line)) {
			e = pr_err(er, -EINVAL, "a cgroup line is longer than %zu bytes", sizeof(line) - 1);
			break;
		}
		memcpy(line, l, n);
		line[n] = 0;
		l += n + (l[n] == '\n');
		if (!n)
			continue;
		/* ID:CONTROLLERS:PATH; the path may hold colons. */
		if (!(c1 = strchr(line, ':')) || !(c2 = strchr(c1 + 1, ':')) || c2[1] != '/') {
			e = pr_err(er, -EINVAL, "malformed cgroup line '%.80s' (expected ID:CONTROLLERS:/PATH)", line);
			break;
		}
		*c2 = 0;
		char procs[512];
		/* "/../x": a cgroup above the writer's cgroup namespace's root,
		 * which no path here names. */
		int found = up_a_level(c2 + 1) ? 0 : locate(mi, c1 + 1, c2 + 1, procs, sizeof(procs));
		if (found < 0) {
			e = pr_err(er, found, "the cgroup %.200s is too deep a path", c2 + 1);
		} else if (found) {
			size_t pl = strlen(procs) + 1;
			if (cg->n == ENGINE_CGROUPS_MAX)
				e = pr_err(er, -E2BIG, "more cgroup hierarchies than phos takes (%d)", ENGINE_CGROUPS_MAX);
			else if (used + pl > sizeof(cg->procs))
				e = pr_err(er, -E2BIG, "the cgroups' paths are longer than phos takes (%zu bytes in all)",
					   sizeof(cg->procs));
			else
				memcpy(cg->procs + used, procs, pl), used += pl, cg->n++;
		}
	}
	fclose(mi);
	if (e)
		cg->n = 0;
	return e;
}

int engine_cgroups_keep_writable(engine_cgroups *cg, char *dropped, size_t len, perr *er)
{
	engine_cgroups kept = { .n = 0 };
	size_t used = 0, said = 0;
	int n = 0;
	*dropped = 0;
	const char *p = cg->procs;
	for (int i = 0; i < cg->n; i++, p += strlen(p) + 1) {
		int fd = open(p, O_WRONLY | O_CLOEXEC);
		if (fd >= 0) {
			close(fd);
			size_t pl = strlen(p) + 1;
			memcpy(kept.procs + used, p, pl);
			used += pl;
			kept.n++;
			continue;
		}
		if (errno != EROFS && errno != EACCES && errno != EPERM)
			return pr_perror(er, -errno, "cannot join the cgroup of %s", p);
		int w = snprintf(dropped + said, len - said, "%s%s (%s)", n ? ", " : "", p, strerror(errno));
		said = w > 0 && (size_t)w < len - said ? said + (size_t)w : said;
		n++;
	}
	*cg = kept;
	return n;
}

int engine_cgroups_enter(const engine_cgroups *cg, const char **failed)
{
	const char *p = cg->procs;
	for (int i = 0; i < cg->n; i++, p += strlen(p) + 1) {
		int fd = open(p, O_WRONLY | O_CLOEXEC);
		int e = fd < 0 ? -errno : write(fd, "0\n", 2) == 2 ? 0 : -errno;
		if (fd >= 0)
			close(fd);
		if (e) {
			*failed = p;
			return e;
		}
	}
	return 0;
}
