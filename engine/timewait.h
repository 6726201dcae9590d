/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Closed connections that hold the TCP addresses of an image
 * (timewait.c says why a restore ends them).
 */
#ifndef PHOS_ENGINE_TIMEWAIT_H
#define PHOS_ENGINE_TIMEWAIT_H

#include "error.h"

/* Ends every closed TCP socket on this machine (TIME_WAIT, or FIN_WAIT2
 * owned by no process) whose local address is one that a TCP socket of
 * the CRIU images in dir needs: the port a
 * socket of the image listens on, or a connection's own two ends.
 * *ended counts them. A dir without files.img has none. Errors: -errno
 * of reading dir/files.img, -EBADMSG (it is not CRIU's), -ENOMEM, and
 * -errno of the kernel's socket diagnostics (-EPERM without
 * CAP_NET_ADMIN, -EOPNOTSUPP where the kernel cannot end sockets); er
 * says which. */
int engine_timewait_end(const char *dir, int *ended, perr *er);

#endif
