/*
 * A job name's images (cli.h): phos run --name JOB links each good image
 * it takes in the store, so that a job that comes back with another pid
 * (requeued, restarted) finds them:
 *
 *   STORE/jobs/JOB/1 -> STORE/4242/1     the images, oldest first
 *   STORE/jobs/JOB/2 -> STORE/5120/3
 *   STORE/jobs/JOB/latest -> 2           the newest
 *
 * Each link is made whole (a number taken by symlink, latest replaced by
 * rename), so that two writers, or a crash, leave no half link.
 */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

bool job_name_ok(const char *s)
{
	size_t n = strlen(s);
	return n > 0 && n <= 64 && s[0] != '.' &&
	       strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

void job_dir(const char *store, const char *name, char *out, size_t len)
{
	snprintf(out, len, "%s/jobs/%s", store, name);
}

/* An entry's number (1, 2, …), or 0 for another name. */
static unsigned long entry_number(const char *s)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);
	return s[0] >= '1' && s[0] <= '9' && !*end ? v : 0;
}

/* The numbered entries of dir, highest first, into a malloc'd *out. */
static int numbers(const char *dir, unsigned long **out, int *n)
{
	DIR *d = opendir(dir);
	if (!d)
		return -errno;
	int k = 0, cap = 16;
	unsigned long *v = malloc(cap * sizeof(*v));
	for (struct dirent *de; v && (de = readdir(d));) {
		unsigned long x = entry_number(de->d_name);
		if (!x)
			continue;
		if (k == cap) {
			unsigned long *w = realloc(v, (cap *= 2) * sizeof(*v));
			if (!w) {
				free(v);
				v = NULL;
				break;
			}
			v = w;
		}
		int i = k++;
		for (; i > 0 && v[i - 1] < x; i--) /* kept in order, highest first */
			v[i] = v[i - 1];
		v[i] = x;
	}
	closedir(d);
	*out = v;
	*n = k;
	return v ? 0 : -ENOMEM;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path) ? -1 : 0;
}

/* Drops link dir/N, and the image it names when that lies in store: a
 * store's STORE/PID/latest that named it goes too. */
static void drop(const char *store, const char *dir, unsigned long num)
{
	char link[PATH_MAX + 32], to[PATH_MAX];
	snprintf(link, sizeof(link), "%s/%lu", dir, num);
	ssize_t n = readlink(link, to, sizeof(to) - 1);
	unlink(link);
	size_t sl = strlen(store);
	if (n <= 0 || (size_t)n <= sl + 1 || strncmp(to, store, sl) || to[sl] != '/')
		return;
	to[n] = 0;
	char latest[PATH_MAX + 16], at[PATH_MAX];
	const char *base = strrchr(to, '/') + 1;
	snprintf(latest, sizeof(latest), "%.*s/latest", (int)(base - 1 - to), to);
	ssize_t m = readlink(latest, at, sizeof(at) - 1);
	if (m > 0 && (size_t)m == strlen(base) && !strncmp(at, base, (size_t)m))
		unlink(latest);
	nftw(to, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Points dir/latest at num, replacing it whole. */
static int set_latest(const char *dir, unsigned long num)
{
	char tmp[PATH_MAX + 48], latest[PATH_MAX + 16], target[24];
	snprintf(tmp, sizeof(tmp), "%s/.latest.%d", dir, (int)getpid());
	snprintf(latest, sizeof(latest), "%s/latest", dir);
	snprintf(target, sizeof(target), "%lu", num);
	unlink(tmp);
	if (symlink(target, tmp) || rename(tmp, latest)) {
		int e = -errno;
		unlink(tmp);
		return e;
	}
	return 0;
}

int job_record(const char *store, const char *name, const char *image, int keep)
{
	char jobs[PATH_MAX], dir[PATH_MAX];
	snprintf(jobs, sizeof(jobs), "%s/jobs", store);
	job_dir(store, name, dir, sizeof(dir));
	if ((mkdir(jobs, 0755) && errno != EEXIST) || (mkdir(dir, 0700) && errno != EEXIST))
		return -errno;
	unsigned long *v = NULL, num = 0;
	int n = 0, e = numbers(dir, &v, &n);
	if (e)
		return e;
	num = n ? v[0] : 0;
	char link[PATH_MAX + 32];
	do { /* another writer may take a number first */
		snprintf(link, sizeof(link), "%s/%lu", dir, ++num);
		e = symlink(image, link) ? -errno : 0;
	} while (e == -EEXIST);
	if (!e)
		e = set_latest(dir, num);
	for (int i = 0; !e && keep > 0 && i < n; i++)
		if (i + 1 >= keep) /* the new one and keep - 1 of the older */
			drop(store, dir, v[i]);
	free(v);
	return e;
}

void cli_free_paths(char **paths, int n)
{
	for (int i = 0; paths && i < n; i++)
		free(paths[i]);
	free(paths);
}

/* Appends dir/entry to paths (room for it is there). */
static void add_path(char **paths, int *k, const char *dir, const char *entry)
{
	char *p = NULL;
	if (asprintf(&p, "%s/%s", dir, entry) > 0)
		paths[(*k)++] = p;
}

int job_images(const char *from, char ***out, int *n)
{
	char manifest[PATH_MAX + 16], latest[PATH_MAX + 16], at[64] = "";
	snprintf(manifest, sizeof(manifest), "%s/manifest.phos", from);
	*out = NULL;
	*n = 0;
	if (access(manifest, F_OK) == 0) {
		char **p = calloc(1, sizeof(*p));
		if (!p || !(p[0] = strdup(from))) {
			free(p);
			return -ENOMEM;
		}
		*out = p;
		*n = 1;
		return 0;
	}
	unsigned long *v = NULL;
	int k = 0, e = numbers(from, &v, &k);
	if (e)
		return e == -ENOTDIR ? -ENOENT : e;
	snprintf(latest, sizeof(latest), "%s/latest", from);
	ssize_t m = readlink(latest, at, sizeof(at) - 1);
	at[m > 0 ? m : 0] = 0;
	char **p = calloc((size_t)k + 1, sizeof(*p));
	int got = 0;
	if (p && *at && !strchr(at, '/'))
		add_path(p, &got, from, at);
	for (int i = 0; p && i < k; i++) {
		char num[24];
		snprintf(num, sizeof(num), "%lu", v[i]);
		if (strcmp(num, at))
			add_path(p, &got, from, num);
	}
	free(v);
	*out = p;
	*n = got;
	return p ? 0 : -ENOMEM;
}
