/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Eight processes checkpointed at the same moment, round after round, all
 * succeed: eight cow_apps run under phos (4 MiB each, their own seeds),
 * and each round writes `checkpoint` to all eight ctls at once, from
 * eight threads. Every job must end done, every image verifies, and
 * every process checks its device memory against its host copies after
 * each round. PHOS_AT_ONCE_ROUNDS sets the rounds (default 20).
 *
 * Then all eight are killed and restored together, lazily, each from its
 * last image: all eight run again and check.
 */
#include <pthread.h>

#include "phosfs_test.h"

#define N 8

typedef struct one {
	rig *r;
	pid_t pid;
	char out[PATH_MAX], image[PATH_MAX], last[256];
	int round, done;
} one;

static void *checkpoint_one(void *arg)
{
	one *o = arg;
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "checkpoint name=r%d\n", o->round);
	snprintf(o->image, sizeof(o->image), "%s/%d/r%d", o->r->store, (int)o->pid, o->round);
	o->done = rig_checkpoint(o->r, o->pid, cmd, o->last, sizeof(o->last)) && rig_verify(o->image);
	return NULL;
}

int main(void)
{
	rig r;
	rig_require(&r);
	char app[PATH_MAX], cubin[PATH_MAX];
	rig_cow_app_paths(app, cubin);
	int rounds = getenv("PHOS_AT_ONCE_ROUNDS") ? atoi(getenv("PHOS_AT_ONCE_ROUNDS")) : 20;
	if (rounds < 1)
		rounds = 1;
	plan(rounds + 2);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	static one p[N];
	int up = 0, nverify[N] = { 0 };
	unsigned seed = (unsigned)time(NULL);
	for (int i = 0; i < N; i++) {
		char seed_s[16];
		snprintf(seed_s, sizeof(seed_s), "%u", seed + (unsigned)i);
		p[i].r = &r;
		p[i].pid = rig_cow_app(&r, app, cubin, "4", seed_s, 30000);
		rig_out(&r, p[i].pid, p[i].out, sizeof(p[i].out));
		up += p[i].pid > 0;
	}
	ok(up == N, "%d cow_apps run under the tracer (seeds %u to %u)", up, seed, seed + N - 1);
	if (up != N)
		bail("not all cow_apps started");

	for (int k = 0; k < rounds; k++) {
		pthread_t th[N];
		for (int i = 0; i < N; i++) {
			p[i].round = k;
			if (pthread_create(&th[i], NULL, checkpoint_one, &p[i]))
				bail("pthread_create failed");
		}
		int good = 0;
		for (int i = 0; i < N; i++) {
			pthread_join(th[i], NULL);
			int live = p[i].done && rig_cow_verified(p[i].pid, p[i].out, &nverify[i], 5000);
			if (!live)
				diag("round %d, process %d: %s", k, (int)p[i].pid, p[i].last);
			good += live;
		}
		ok(good == N, "round %d: %d of %d checkpoints taken at once ended done, verify, and left their processes intact",
		   k, good, N);
	}

	/* All eight killed, then restored side by side. */
	for (int i = 0; i < N; i++)
		kill(p[i].pid, SIGKILL);
	for (int i = 0; i < N; i++)
		for (int t = 0; t < 100 && rig_alive(p[i].pid); t++)
			usleep(20000);
	unsigned id[N] = { 0 };
	for (int i = 0; i < N; i++) {
		char cmd[PATH_MAX + 16], reply[1024];
		snprintf(cmd, sizeof(cmd), "restore %s\n", p[i].image);
		if (rig_ctl_answer(&r, cmd, reply, sizeof(reply)) || sscanf(reply, "restore %u", &id[i]) != 1)
			diag("restore %s: %s", p[i].image, reply);
	}
	int back = 0;
	for (int i = 0; i < N; i++) {
		char st[4096];
		const char *how = id[i] ? rig_restore_follow(&r, id[i], 0, 120000, st, sizeof(st)) : "";
		pid_t pid = *how && strcmp(how, "failed") ? rig_restored(st) : 0;
		int good = pid > 0 && rig_cow_verified(pid, p[i].out, &nverify[i], 10000);
		if (!good)
			diag("restore %u of %s: %s", id[i], p[i].image, st);
		back += good;
		p[i].pid = pid;
	}
	ok(back == N, "all %d, killed and restored at once from their last images, run again and check (%d)", N, back);
	for (int i = 0; i < N; i++)
		if (p[i].pid > 0)
			kill(p[i].pid, SIGKILL);
	rig_reap();
	rig_cleanup(&r);
	return done();
}
