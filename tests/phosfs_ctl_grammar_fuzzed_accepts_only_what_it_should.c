/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The ctl grammar (phosfs/ctl.c), fuzzed in process: 200,000 mutations of
 * valid commands (checkpoint, cancel, release, schedule, restore) and random
 * bytes, for /<pid>/ctl and /ctl. Each is accepted or refused with
 * EINVAL and a message, never anything else, and what is accepted holds
 * only values in range. DURATION's forms are checked one by one.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../phosfs/ctl.h"
#include "ctl_fuzz.h"
#include "tap.h"

static const char *const seeds[] = {
	"checkpoint stop name=a kill\n", "checkpoint cow timeout=0.5\n", "checkpoint recopy name=x.y-z\n", "cancel\n",
	"checkpoint recopy hold=30 name=m\n", "release kill\n", "release resume\n",
	"schedule every=30 keep=3 cow\n", "schedule every=auto mtbf=1d keep=2\n", "schedule off\n",
	"schedule every=1.5h stop\n", "restore /tmp/x eager lazy-pages\n", "restore /tmp/y lazy growing\n", "restore /a/b device=0=1,1=0\n",
};
static const char *const words[] = { "checkpoint", "schedule", "every=", "every=auto", "mtbf=", "keep=", "off",
				     "cancel", "stop",	   "cow",      "recopy", "kill", "name=", "timeout=", "hold=", "release", "resume",
				     "restore",	   "lazy", "growing",     "eager",	   "1d",     "0",    "-5",    "1e999",
				     "nan",	   " ",	       "\t",	   "=",	     "\n",   "99999999" };
static const ctl_fuzz fuzz = { seeds, sizeof(seeds) / sizeof(*seeds), words, sizeof(words) / sizeof(*words),
				80, true };

/* Whether an accepted command holds only values in range. */
static bool in_range(const ctl_cmd *c, bool root)
{
	if (root)
		return c->verb == CTL_RESTORE && c->dir[0] == '/';
	switch (c->verb) {
	case CTL_CHECKPOINT:
		return (!*c->name || ctl_name_ok(c->name)) && c->timeout_ms <= 86400000u && c->hold_ms <= 3600000u &&
		       !(c->kill && c->hold_ms);
	case CTL_RELEASE:
	case CTL_CANCEL:
		return true;
	case CTL_SCHEDULE:
		return c->off ? !c->every_s && !c->keep
			      : (c->every_s == 0 || (c->every_s >= 1 && c->every_s <= 365 * 86400.0)) &&
					(c->mtbf_s == 0 || (c->mtbf_s >= 1 && !c->every_s)) && c->keep <= 100000;
	default:
		return false;
	}
}

int main(void)
{
	plan(3);
	unsigned seed = 29;
	int accepted = 0, refused = 0, wrong = 0;
	static char buf[4200];
	static ctl_cmd c;
	for (int i = 0; i < 200000; i++) {
		size_t n = ctl_mutate(&fuzz, buf, &seed);
		bool root = i % 5 == 0;
		perr er = { 0 };
		int e = ctl_parse(buf, n, root, &c, &er);
		if (e == 0 && in_range(&c, root)) {
			accepted++;
		} else if (e == -EINVAL && er.msg[0]) {
			refused++;
		} else if (wrong++ < 5) {
			diag("'%.*s' (%s): %d, '%s'", (int)n, buf, root ? "/ctl" : "/<pid>/ctl", e, er.msg);
		}
	}
	ok(!wrong, "200000 fuzzed commands: %d accepted in range, %d refused with EINVAL and why", accepted, refused);
	ok(accepted > 1000 && refused > 1000, "the fuzz reached both sides of the grammar");

	static const struct {
		const char *s;
		double v; /* < 0: refused */
	} d[] = { { "90", 90 },	      { "1.5s", 1.5 }, { "15m", 900 }, { "2h", 7200 }, { "1d", 86400 },
		  { "365d", 31536000 }, { "", -1 },	 { "0", -1 },	 { "-1", -1 },	 { "1x", -1 },
		  { "1e999", -1 },	  { "nan", -1 },   { "inf", -1 },  { "366d", -1 }, { "0.5", -1 },
		  { "1 s", -1 },	  { "m", -1 } };
	int right = 0;
	for (size_t i = 0; i < sizeof(d) / sizeof(*d); i++) {
		double v = 0;
		perr er = { 0 };
		int e = ctl_duration(d[i].s, &v, &er);
		bool good = d[i].v < 0 ? e == -EINVAL && strstr(er.msg, "bad duration") : !e && fabs(v - d[i].v) < 1e-9;
		right += good;
		if (!good)
			diag("duration '%s': %d, %g, '%s'", d[i].s, e, v, er.msg);
	}
	ok(right == (int)(sizeof(d) / sizeof(*d)), "durations: seconds, or with s, m, h, d, from 1 s to 365 d; "
						    "anything else is refused");
	return done();
}
