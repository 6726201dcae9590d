/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * phos run --restore-from (cli.h): the newest good image of a job comes
 * back; a damaged one is passed over for the one before it.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../image-format/phosimg.h"
#include "cli.h"

/* How long a restore may take before phos run gives up on it (phosfs's
 * own steps have deadlines: --restore-timeout). */
#define RESUME_TIMEOUT_S 3600

int cli_image_verify(const char *image, char *why, size_t len)
{
	phosimg *img = NULL;
	int e = phosimg_open(image, &img);
	if (!e)
		e = phosimg_verify(img);
	if (e)
		snprintf(why, len, "%s", *phosimg_last_error() ? phosimg_last_error() : strerror(-e));
	phosimg_close(img);
	return e;
}

int cli_restore_follow(unsigned id, bool whole, pid_t *pid, char *why, size_t len)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/restores/%u", cli_mount(), id);
	for (long waited_ms = 0;; waited_ms += 10) {
		char *st = cli_slurp(path), state[32] = "", got[32] = "", err[2048] = "";
		if (!st) {
			snprintf(why, len, "%s: %s", path, strerror(errno));
			return -EIO;
		}
		cli_field(st, "state", state, sizeof(state));
		cli_field(st, "restored pid", got, sizeof(got));
		cli_field(st, "error", err, sizeof(err));
		free(st);
		if (!strcmp(state, "failed")) {
			snprintf(why, len, "%s", err);
			return -EIO;
		}
		if (!strcmp(state, "done") || (!whole && !strcmp(state, "resumed"))) {
			*pid = (pid_t)atoi(got);
			return 0;
		}
		if (waited_ms > RESUME_TIMEOUT_S * 1000L) {
			snprintf(why, len, "restore %u did not end in %d s", id, RESUME_TIMEOUT_S);
			return -ETIMEDOUT;
		}
		usleep(10000);
	}
}

int cli_restore_image(const char *image, const char *words, bool whole, pid_t *pid, unsigned *idp, char *why,
		      size_t len)
{
	char abs[PATH_MAX], cmd[2 * PATH_MAX + 32], ctl[PATH_MAX], reply[1200];
	if (!realpath(image, abs)) {
		snprintf(why, len, "%s: %s", image, strerror(errno));
		return -EIO;
	}
	snprintf(cmd, sizeof(cmd), "restore %s%s%.*s\n", abs, words && *words ? " " : "", PATH_MAX, words ? words : "");
	snprintf(ctl, sizeof(ctl), "%s/ctl", cli_mount());
	int e = cli_ctl(ctl, cmd, reply, sizeof(reply));
	if (e == -EACCES || e == -EPERM) {
		snprintf(why, len, "%s: permission denied: only root may restore", ctl);
		return -EACCES;
	}
	if (e == -ENOENT || e == -ENOTCONN) {
		snprintf(why, len, "%s: phosfs is not mounted at %s (set PHOS_MOUNT)", ctl, cli_mount());
		return -ENOTCONN;
	}
	unsigned id = 0;
	if (!e && sscanf(reply, "restore %u", &id) != 1)
		e = -EPROTO;
	if (e) {
		snprintf(why, len, "%s", !strncmp(reply, "error: ", 7) ? reply + 7 : strerror(-e));
		return -EIO;
	}
	if (idp)
		*idp = id;
	return cli_restore_follow(id, whole, pid, why, len);
}

int resume_newest(char **imgs, int n, pid_t *pid, char *used, size_t ulen)
{
	for (int i = 0; i < n; i++) {
		char why[3 * PATH_MAX] = "", to[PATH_MAX] = "";
		if (!realpath(imgs[i], to))
			snprintf(to, sizeof(to), "%s", imgs[i]);
		int e = cli_image_verify(to, why, sizeof(why));
		const char *what = "is damaged";
		if (!e) {
			e = cli_restore_image(to, NULL, true, pid, NULL, why, sizeof(why));
			what = "did not restore";
		}
		if (e == -EACCES || e == -ENOTCONN) {
			fprintf(stderr, "phos: --restore-from: %s\n", why);
			return e;
		}
		if (!e) {
			snprintf(used, ulen, "%s", to);
			return 0;
		}
		/* A damaged image's job link goes: a prune then keeps the good
		 * ones before it. */
		bool forgot = !strcmp(what, "is damaged") && job_forget(imgs[i]) == 0;
		fprintf(stderr, "phos: --restore-from: image %s %s: %s; %s%s%s%s\n", to, what, why,
			i + 1 < n ? "falling back to the image before it" : "no image before it",
			forgot ? " (its link is dropped, the image kept for a look: " : "", forgot ? imgs[i] : "",
			forgot ? ")" : "");
	}
	return -ENOENT;
}
