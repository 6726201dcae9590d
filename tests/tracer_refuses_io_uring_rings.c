/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A traced process cannot set up an io_uring ring: CRIU could not dump
 * it, and libuv (under PyTorch's TCP store, in torchrun's agent) makes
 * one through syscall(2) at start. The tracer answers ENOSYS, as a
 * kernel without io_uring does, and libuv goes on with epoll.
 *   - under the tracer, io_uring_setup fails with ENOSYS;
 *   - other system calls through syscall(2) still work (getpid);
 *   - PHOS_ALLOW_IO_URING=1 lets the call through to the kernel.
 * (The program runs itself, preloaded with libphos.so, with "child".)
 */
#include <errno.h>
#include <linux/io_uring.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "testpath.h"

/* The child: sets up a ring of 4 and says how it went, as its status:
 * 0 made, 1 ENOSYS, 2 another error, 3 syscall(getpid) was wrong. */
static int child(void)
{
	if (syscall(SYS_getpid) != getpid())
		return 3;
	struct io_uring_params p;
	memset(&p, 0, sizeof(p));
	long fd = syscall(SYS_io_uring_setup, 4, &p);
	if (fd >= 0) {
		close((int)fd);
		return 0;
	}
	return errno == ENOSYS ? 1 : 2;
}

/* Runs the child preloaded with the tracer (allow: PHOS_ALLOW_IO_URING=1);
 * its status, or -1. */
static int run(const char *self, const char *lib, int allow)
{
	pid_t pid = fork();
	if (pid == 0) {
		setenv("LD_PRELOAD", lib, 1);
		setenv("PHOS_SOCKET", "/nonexistent/phos.sock", 1);
		setenv("ASAN_OPTIONS", "verify_asan_link_order=0:detect_leaks=0", 1);
		if (allow)
			setenv("PHOS_ALLOW_IO_URING", "1", 1);
		execl(self, self, "child", (char *)NULL);
		_exit(127);
	}
	int st;
	return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "child"))
		return child();
	char lib[4096];
	snprintf(lib, sizeof(lib), "%s", test_path("PHOS_LIBPHOS", "../libphos.so"));
	if (access(lib, R_OK))
		skip_all("libphos.so is not built");
	plan(3);
	int plain = child(); /* what this kernel does without the tracer */
	int traced = run("/proc/self/exe", lib, 0);
	ok(traced == 1, "under the tracer, io_uring_setup fails with ENOSYS (child status %d)", traced);
	ok(traced != 3, "other calls through syscall(2) still reach the kernel");
	int allowed = run("/proc/self/exe", lib, 1);
	ok(allowed == plain, "with PHOS_ALLOW_IO_URING=1 the call reaches the kernel, as without the tracer (%d, %d)", allowed,
	   plain);
	return done();
}
