/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Listening abstract unix sockets of an image whose names are taken on
 * this machine, such as the CUDA driver's of an original that still runs
 * beside its clone (sockets.c says how).
 */
#ifndef PHOS_ENGINE_SOCKETS_H
#define PHOS_ENGINE_SOCKETS_H

#include <stddef.h>

#include "error.h"

/* Looks through the CRIU images in dir for listening abstract sockets
 * whose names are bound here. If there are any (*renamed of them), makes
 * the folder CRIU should read instead, out ("WORK.criu-XXXXXX"), with a
 * free name of the same length for each; else out is "". The image is
 * not changed. Errors: -errno of reading dir/files.img or making out,
 * -EBADMSG (files.img is not CRIU's), -EADDRINUSE (no free name); er
 * says which. */
int engine_sockets(const char *dir, const char *work, char *out, size_t outlen, int *renamed, perr *er);

/* Removes the folder engine_sockets made (out "" or NULL: nothing). */
void engine_sockets_end(const char *out);

#endif
