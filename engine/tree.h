/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The processes of a job (tree.c) and their TCP connections (tcp.c), as
 * /proc shows them.
 */
#ifndef PHOS_ENGINE_TREE_H
#define PHOS_ENGINE_TREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../image-format/phosimg.h"

/* root and all its descendants, root first and parents before children,
 * as members (pid, ppid, comm; no flags but PHOSIMG_MEMBER_NS_INIT, with
 * each one's ns_pid, when root is the init of a pid namespace) in a
 * malloc'd *out. Errors:
 * -ESRCH (root is gone), -ENOMEM, errno of opendir(/proc). */
int engine_tree(pid_t root, phosimg_member **out, uint32_t *n);

/* A live process's parent and name (comm, NUL-terminated), from
 * /proc/PID/stat. Errors: -ESRCH (gone, or a zombie), -EIO (unreadable). */
int engine_proc_stat(pid_t pid, pid_t *ppid, char comm[PHOSIMG_COMM_MAX]);

/* The index of pid among m[0..n), or -ENOENT. */
int engine_tree_member(const phosimg_member *m, uint32_t n, pid_t pid);

/* Whether a TCP connection of the processes m[0..n) has its peer outside
 * them (CRIU would save it without holding its peer off): 1, and what
 * says which (process, addresses); 0 if none. Errors: -ENOMEM, errno of
 * reading /proc. */
int engine_tcp_outside(const phosimg_member *m, uint32_t n, char *what, size_t len);

/* Whether pid exists (a zombie included). */
bool engine_alive(pid_t pid);

/* The start time of process pid (clock ticks since boot, /proc/PID/stat):
 * with its pid, what tells it from a later process given the same pid.
 * 0 when it is gone. */
unsigned long long engine_proc_start(pid_t pid);

/* When pid is a zombie, the parent that has not reaped it; else 0. */
pid_t engine_zombie_parent(pid_t pid);

/* Whether pid maps a file whose name starts with `name` ("libnccl"),
 * from /proc/PID/maps; false when it cannot be read. */
bool engine_maps_library(pid_t pid, const char *name);

/* The owner of pid, from /proc; for a pid that has ended, the owner of
 * its folder in store (NULL: none), or (uid_t)-1. */
uid_t engine_proc_owner(pid_t pid, const char *store);

#endif
