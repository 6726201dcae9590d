/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * phos SDK: what an application may tell phos. Every call is a no-op when
 * the process runs without phos (no tracer preloaded), so a program can
 * call it unconditionally and link it without phos installed: the symbols
 * here are weak, and resolve to libphos.so's when it is preloaded.
 */
#ifndef PHOS_H
#define PHOS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Says that now is a good moment to checkpoint: the application is between
 * steps and its GPU memory is in a consistent state. phos may take a
 * checkpoint that is pending before the call returns. Returns 0, or -1 when
 * the process runs without phos. */
int phos_checkpoint_hint(void) __attribute__((weak));

/* Calls phos_checkpoint_hint when phos is present. */
static inline int phos_hint(void)
{
	return phos_checkpoint_hint ? phos_checkpoint_hint() : -1;
}

#ifdef __cplusplus
}
#endif
#endif
