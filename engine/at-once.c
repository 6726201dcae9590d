/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * One step taken by several processes at once (at-once.h).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "at-once.h"

void engine_at_once(void *v, size_t size, int n, void *(*fn)(void *))
{
	char *at = v;
	pthread_t *th = calloc(n > 0 ? (size_t)n : 1, sizeof(*th));
	bool *on = calloc(n > 0 ? (size_t)n : 1, sizeof(*on));
	for (int j = 0; j < n; j++)
		if (!th || !on || !(on[j] = pthread_create(&th[j], NULL, fn, at + (size_t)j * size) == 0))
			fn(at + (size_t)j * size);
	for (int j = 0; j < n; j++)
		if (on && on[j])
			pthread_join(th[j], NULL);
	free(on);
	free(th);
}
