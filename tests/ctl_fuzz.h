/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What the two fuzz tests of the ctl grammar share: commands made from
 * seeds and words, and mutated (tests/phosfs_ctl_rejects_malformed_commands.c
 * through the mount, tests/phosfs_ctl_grammar_fuzzed_accepts_only_what_it_should.c
 * in process).
 */
#ifndef PHOS_TESTS_CTL_FUZZ_H
#define PHOS_TESTS_CTL_FUZZ_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Where a fuzzed command comes from. */
typedef struct ctl_fuzz {
	const char *const *seeds; /* valid commands */
	size_t nseeds;
	const char *const *words; /* glued at random; "" stands for a NUL byte */
	size_t nwords;
	size_t max_random;        /* random bytes: 1 to this many */
	bool spaced;              /* a space after some glued words */
} ctl_fuzz;

/* One fuzzed command into out (room for max_random bytes, or ten words,
 * or a seed and four more bytes), from seed: random bytes, words glued
 * at random, or a seed with one to four bytes changed, removed or
 * inserted. Returns its length. */
static inline size_t ctl_mutate(const ctl_fuzz *f, char *out, unsigned *seed)
{
	size_t n = 0;
	int kind = rand_r(seed) % 3;
	if (kind == 0) {
		n = (size_t)rand_r(seed) % f->max_random + 1;
		for (size_t i = 0; i < n; i++)
			out[i] = (char)(rand_r(seed) % 256);
		return n;
	}
	if (kind == 1) {
		for (int i = rand_r(seed) % 10 + 1; i > 0; i--) {
			const char *w = f->words[(size_t)rand_r(seed) % f->nwords];
			size_t l = *w ? strlen(w) : 1;
			memcpy(out + n, w, l);
			n += l;
			if (f->spaced && rand_r(seed) % 2)
				out[n++] = ' ';
		}
		return n;
	}
	const char *s = f->seeds[(size_t)rand_r(seed) % f->nseeds];
	n = strlen(s);
	memcpy(out, s, n);
	for (int i = rand_r(seed) % 4 + 1; i > 0 && n > 0; i--) {
		size_t at = (size_t)rand_r(seed) % n;
		switch (rand_r(seed) % 3) {
		case 0: out[at] = (char)(rand_r(seed) % 256); break;
		case 1: memmove(out + at, out + at + 1, n - at - 1), n--; break;
		default: memmove(out + at + 1, out + at, n - at), out[at] = (char)(rand_r(seed) % 256), n++;
		}
	}
	return n;
}

#endif
