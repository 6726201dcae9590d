/* SPDX-License-Identifier: GPL-2.0-only */
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
 * rename), so that two writers, or a crash, leave no half link. The
 * folders are opened from the store's without following links: a link
 * planted at STORE/jobs or STORE/jobs/JOB is refused, and an old image is
 * removed only where its link, resolved, names an image of the store.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../image-format/phosimg.h"
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

/* The numbered entries of folder fd (kept open), highest first, into a
 * malloc'd *out. */
static int numbers_at(int fd, unsigned long **out, int *n)
{
	int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	DIR *d = dup < 0 ? NULL : fdopendir(dup);
	if (!d) {
		int e = -errno;
		if (dup >= 0)
			close(dup);
		return e;
	}
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

/* The numbered entries of dir, highest first, into a malloc'd *out. */
static int numbers(const char *dir, unsigned long **out, int *n)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int e = numbers_at(fd, out, n);
	close(fd);
	return e;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path) ? -1 : 0;
}

/* Drops link N of job folder fd, and the image it names when that is an
 * image of the store (STORE/PID/NAME, resolved, holding manifest.phos;
 * realstore is the store's real path): a STORE/PID/latest that named it
 * goes too. */
static void drop(const char *realstore, int fd, unsigned long num)
{
	char link[24], to[PATH_MAX], real[PATH_MAX];
	snprintf(link, sizeof(link), "%lu", num);
	ssize_t n = readlinkat(fd, link, to, sizeof(to) - 1);
	unlinkat(fd, link, 0);
	if (n <= 0)
		return;
	to[n] = 0;
	size_t sl = strlen(realstore);
	/* Resolved, so that no link in the way leads out of the store. */
	if (!realpath(to, real) || strncmp(real, realstore, sl) || real[sl] != '/' || strchr(real + sl + 1, '/') !=
	    strrchr(real, '/'))
		return;
	char manifest[PATH_MAX + 16];
	snprintf(manifest, sizeof(manifest), "%s/" PHOSIMG_MANIFEST_FILE, real);
	struct stat st;
	if (lstat(manifest, &st) || !S_ISREG(st.st_mode))
		return;
	char latest[PATH_MAX + 16], at[PATH_MAX];
	const char *base = strrchr(real, '/') + 1;
	snprintf(latest, sizeof(latest), "%.*s/latest", (int)(base - 1 - real), real);
	ssize_t m = readlink(latest, at, sizeof(at) - 1);
	if (m > 0 && (size_t)m == strlen(base) && !strncmp(at, base, (size_t)m))
		unlink(latest);
	nftw(real, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Points latest in job folder fd at num, replacing it whole. */
static int set_latest(int fd, unsigned long num)
{
	char tmp[48], target[24];
	snprintf(tmp, sizeof(tmp), ".latest.%d", (int)getpid());
	snprintf(target, sizeof(target), "%lu", num);
	unlinkat(fd, tmp, 0);
	if (symlinkat(target, fd, tmp) || renameat(fd, tmp, fd, "latest")) {
		int e = -errno;
		unlinkat(fd, tmp, 0);
		return e;
	}
	return 0;
}

/* The folder name in folder at (made if missing), opened without
 * following a link: one the store did not make there is refused
 * (-ELOOP; -ENOTDIR for another file). */
static int open_dir_at(int at, const char *name, mode_t mode)
{
	if (mkdirat(at, name, mode) && errno != EEXIST)
		return -errno;
	int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd < 0 && (errno == ENOTDIR || errno == ELOOP) && !fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) &&
	    S_ISLNK(st.st_mode))
		return -ELOOP;
	return fd < 0 ? -errno : fd;
}

int job_record(const char *store, const char *name, const char *image, int keep)
{
	char realstore[PATH_MAX];
	if (!realpath(store, realstore))
		return -errno;
	int sfd = open(realstore, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sfd < 0)
		return -errno;
	int jfd = open_dir_at(sfd, "jobs", 0755);
	int fd = jfd < 0 ? jfd : open_dir_at(jfd, name, 0700);
	close(sfd);
	if (jfd >= 0)
		close(jfd);
	if (fd < 0)
		return fd;
	unsigned long *v = NULL, num = 0;
	int n = 0, e = numbers_at(fd, &v, &n);
	if (e) {
		close(fd);
		return e;
	}
	num = n ? v[0] : 0;
	char link[24];
	do { /* another writer may take a number first */
		snprintf(link, sizeof(link), "%lu", ++num);
		e = symlinkat(image, fd, link) ? -errno : 0;
	} while (e == -EEXIST);
	if (!e)
		e = set_latest(fd, num);
	for (int i = 0; !e && keep > 0 && i < n; i++)
		if (i + 1 >= keep) /* the new one and keep - 1 of the older */
			drop(realstore, fd, v[i]);
	free(v);
	close(fd);
	return e;
}

int job_forget(const char *link)
{
	struct stat st;
	if (lstat(link, &st))
		return -errno;
	if (!S_ISLNK(st.st_mode))
		return -EINVAL;
	return unlink(link) ? -errno : 0;
}

void cli_free_paths(char **paths, int n)
{
	for (int i = 0; paths && i < n; i++)
		free(paths[i]);
	free(paths);
}

/* Appends dir/entry to paths (room for it is there), unless it names
 * nothing (a latest whose image's link was dropped). */
static void add_path(char **paths, int *k, const char *dir, const char *entry)
{
	char *p;
	if (asprintf(&p, "%s/%s", dir, entry) < 0)
		return;
	if (access(p, F_OK) == 0)
		paths[(*k)++] = p;
	else
		free(p);
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
