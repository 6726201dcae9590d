/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * One step taken by several processes at once: each on a thread of its
 * own, so that none waits for a peer that is not yet asked.
 */
#ifndef PHOS_ENGINE_AT_ONCE_H
#define PHOS_ENGINE_AT_ONCE_H

#include <stddef.h>

/* Runs fn on each of the n elements of v (each size bytes) at once, each
 * on a thread of its own (inline where no thread can be had), and waits
 * for all of them. fn reports through its element. */
void engine_at_once(void *v, size_t size, int n, void *(*fn)(void *));

#endif
