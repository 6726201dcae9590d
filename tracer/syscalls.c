/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * System calls a checkpoint could not carry, refused inside a traced
 * process as the kernel refuses them where they are not built in.
 *
 * io_uring: CRIU cannot dump a process with a ring. libuv, which
 * PyTorch's TCP store (torchrun's agent) runs on, sets up rings through
 * syscall(2) whatever UV_USE_IO_URING says, and goes on with epoll when
 * the kernel says ENOSYS; so does every careful user of io_uring.
 * PHOS_ALLOW_IO_URING=1 lets rings be made (and checkpoints fail).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

#include "tracer.h"

static bool refused(long nr)
{
	if (nr != SYS_io_uring_setup)
		return false;
	const char *allow = getenv("PHOS_ALLOW_IO_URING");
	return !allow || strcmp(allow, "1") != 0;
}

/* Six arguments are passed on, whatever the caller gave, as glibc's own
 * syscall(2) does: those it did not give are read from where they would
 * be, and not used. (So AddressSanitizer is told to let the reads be.) */
TR_EXPORT __attribute__((no_sanitize("address"))) long syscall(long nr, ...)
{
	static long (*real)(long, ...);
	va_list ap;
	va_start(ap, nr);
	long a[6];
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	if (refused(nr)) {
		errno = ENOSYS;
		return -1;
	}
	if (!real)
		*(void **)&real = tr_real_next("syscall");
	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	return real(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}
