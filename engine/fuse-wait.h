/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Which FUSE file systems a process tree waits for (fuse-wait.c): for a
 * step that ran out of time, to name the mount whose daemon held it.
 */
#ifndef PHOS_ENGINE_FUSE_WAIT_H
#define PHOS_ENGINE_FUSE_WAIT_H

#include <stddef.h>
#include <sys/types.h>

/* How many processes of root's tree (root and its descendants) sleep
 * waiting for a FUSE daemon's answer; where any does, a clause for an
 * error message into out (len bytes; else ""): "; it waited for a FUSE
 * file system whose daemon did not answer, mounted on A, B", the mount
 * points of this machine's FUSE file systems they may wait for (those
 * with requests waiting, where fusectl is mounted; else all), but
 * phosfs's own ($PHOS_MOUNT). Errors: those of engine_tree. */
int engine_fuse_held(pid_t root, char *out, size_t len);

#endif
