/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What the test programs run under phos share (tests/apps/): SIGUSR1
 * asks one to check its device memory, and a driver call that fails ends
 * it, saying which. Each defines APP_NAME (its name in that message), and
 * APP_FAILED (its exit status then; 2 unless it says), before including.
 */
#ifndef PHOS_TEST_APP_H
#define PHOS_TEST_APP_H

#include <cuda.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef APP_FAILED
#define APP_FAILED 2
#endif

/* Set by SIGUSR1 (on_usr1): check the device memory at the next chance. */
static volatile sig_atomic_t verify_asked;

static void on_usr1(int sig)
{
	(void)sig;
	verify_asked = 1;
}

/* Ends the program when r is an error: "APP_NAME: WHAT failed: MESSAGE". */
static void check(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS) {
		const char *s = "?";
		cuGetErrorString(r, &s);
		printf("%s: %s failed: %s\n", APP_NAME, what, s);
		fflush(stdout);
		exit(APP_FAILED);
	}
}

#endif
