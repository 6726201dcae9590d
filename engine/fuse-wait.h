/*
 * Which FUSE file systems a process tree waits for (fuse-wait.c): for a
 * step that ran out of time, to name the mount whose daemon held it.
 */
#ifndef PHOS_ENGINE_FUSE_WAIT_H
#define PHOS_ENGINE_FUSE_WAIT_H

#include <stddef.h>
#include <sys/types.h>

/* How many processes of root's tree (root and its descendants) sleep
 * waiting for a FUSE daemon's answer; where any does, the mount points of
 * this machine's FUSE file systems they may wait for (those with
 * requests waiting, where fusectl is mounted; else all), but skip, into
 * out (len bytes, ", " between them). Errors: those of engine_tree. */
int engine_fuse_waiters(pid_t root, const char *skip, char *out, size_t len);

#endif
