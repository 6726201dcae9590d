/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The ctl grammar (phosfs(8)):
 *
 *   /<pid>/ctl   checkpoint [cow|recopy|stop] [name=NAME] [kill|hold=SECONDS] [timeout=SECONDS]
 *                release kill|resume
 *                cancel
 *                schedule every=DURATION|auto [mtbf=DURATION] [keep=N] [cow|recopy|stop]
 *                schedule off
 *   /ctl         restore DIR [eager|lazy] [lazy-pages] [growing] [device=OLD=NEW[,OLD=NEW…]]
 *
 * One command per write, words separated by blanks, one trailing newline
 * allowed. NAME is 1 to 64 of [A-Za-z0-9._-], not starting with '.', and
 * not "latest". DIR is an absolute path without blanks. OLD and NEW are
 * GPU ordinals or UUIDs (restore_devices_check). DURATION is seconds, or a
 * number with s, m, h or d (ctl_duration).
 */
#ifndef PHOSFS_CTL_H
#define PHOSFS_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../engine/error.h"

#define CTL_MAX 4096
#define CTL_NAME_MAX 64

enum ctl_verb { CTL_CHECKPOINT = 1, CTL_CANCEL, CTL_RESTORE, CTL_SCHEDULE, CTL_RELEASE };
enum ctl_proto { CTL_DEFAULT = 0, CTL_COW, CTL_RECOPY, CTL_STOP };

typedef struct ctl_cmd {
	enum ctl_verb verb;
	enum ctl_proto proto; /* checkpoint */
	bool kill;            /* checkpoint: end the process after it */
	char name[CTL_NAME_MAX + 1]; /* checkpoint: "" = the next number */
	uint32_t timeout_ms;  /* checkpoint: each process's quiesce; 0 = phosfs's */
	uint32_t hold_ms;     /* checkpoint: the tree stays stopped after its dump, until released, up to this; 0 = no hold */
	bool release_kill;    /* release: the held tree ends (else it runs on) */
	bool lazy;            /* restore: lazy (the default) or eager */
	bool lazy_pages;      /* restore: CPU pages too come back while it runs */
	bool growing;         /* restore: the image's data is still being written (phos receive) */
	char dir[CTL_MAX];    /* restore */
	char devices[CTL_MAX]; /* restore: the moves of GPUs, "" for none */
	/* schedule: every `every_s` seconds, or (every_s 0) at Young and
	 * Daly's interval for mtbf_s; keep the newest `keep` (0: all); off:
	 * no more. Its protocol is proto. */
	double every_s, mtbf_s;
	unsigned keep;
	bool off;
} ctl_cmd;

/* Parses a write to /<pid>/ctl (root false) or to /ctl (root true).
 * Returns 0, or -EINVAL with er saying what is wrong. */
int ctl_parse(const char *buf, size_t len, bool root, ctl_cmd *out, perr *er);

/* SECONDS (decimals allowed: "0.5") into *ms, from 1 ms to
 * JOB_TIMEOUT_MAX_MS. Returns 0, or -EINVAL with er saying why. */
int ctl_timeout(const char *s, uint32_t *ms, perr *er);

/* DURATION ("90", "1.5s", "15m", "2h", "1d") into *s, from 1 s to 365
 * days. Returns 0, or -EINVAL with er saying why. */
int ctl_duration(const char *w, double *s, perr *er);

/* Whether s is a valid checkpoint name. */
bool ctl_name_ok(const char *s);

#endif
