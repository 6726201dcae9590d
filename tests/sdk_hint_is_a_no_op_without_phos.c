/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * include/phos.h: phos_hint() returns -1 in a program running without
 * phos, and 0 under the tracer, where it passes the gate. The program
 * links without libphos.so either way. The test runs itself both ways.
 */
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "../include/phos.h"
#include "tap.h"
#include "testpath.h"

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "child"))
		return phos_hint() == 0 ? 0 : 1;
	plan(2);
	ok(phos_hint() == -1, "without phos, phos_hint() is a no-op that returns -1");
	char lib[PATH_MAX];
	snprintf(lib, sizeof(lib), "%s", test_path("PHOS_LIBPHOS", "../libphos.so"));
	char cmd[PATH_MAX * 2 + 128];
	snprintf(cmd, sizeof(cmd),
		 "LD_PRELOAD=%s ASAN_OPTIONS=verify_asan_link_order=0 PHOS_SOCKET=/nonexistent %s child", lib,
		 argv[0]);
	ok(access(lib, R_OK) == 0 && system(cmd) == 0, "under the tracer, phos_hint() returns 0");
	return done();
}
