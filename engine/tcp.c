/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * TCP connections of a job, before its dump (engine.h).
 *
 * CRIU saves a job's TCP connections (criu.c passes --tcp-established)
 * with no firewall rule around them (--network-lock skip): a job shares
 * the machine's network namespace, and rules there would need iptables
 * or nftables on every machine. Without them, a connection is saved
 * whole only when nothing reaches it while CRIU reads it, which holds
 * for a connection between two processes of the frozen tree, and not for
 * one whose peer is outside: data the peer sends meanwhile is taken by
 * the kernel and missing from the image. So such a connection fails the
 * checkpoint, before anything is parked.
 *
 * A socket of the tree is one an fd of a member names (/proc/PID/fd,
 * "socket:[INODE]"); the connections are the tree's network namespace's
 * /proc/PID/net/tcp and tcp6 rows, each with its addresses, state and
 * inode. A connected socket of the tree whose reverse (local and remote
 * swapped) is not a socket of the tree has its peer outside. IPv4
 * addresses are compared as IPv4-mapped IPv6 ones: a dual-stack server
 * (listening on ::) sees an IPv4 client as ::ffff:a.b.c.d.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "progress.h"
#include "tree.h"

#define TCP_LISTEN 0x0A /* /proc/net/tcp's states (include/net/tcp_states.h) */
#define TCP_CLOSE 0x07

/* A row of /proc/net/tcp or tcp6, its addresses as IPv6 ones (an IPv4
 * address as ::ffff:a.b.c.d, as a dual-stack socket sees its peer). */
typedef struct conn {
	unsigned char local[16], remote[16];
	unsigned lport, rport, state;
	unsigned long inode;
} conn;

/* The tree's socket inodes, sorted, and the pid holding each. */
typedef struct owned {
	unsigned long inode;
	pid_t pid;
} owned;

static int by_inode(const void *a, const void *b)
{
	unsigned long x = ((const owned *)a)->inode, y = ((const owned *)b)->inode;
	return x < y ? -1 : x > y;
}

static const owned *find_owned(const owned *o, size_t n, unsigned long inode)
{
	owned key = { .inode = inode };
	return inode ? bsearch(&key, o, n, sizeof(*o), by_inode) : NULL;
}

/* The array a (elements of size bytes, n used of *cap) with room for one
 * more: a itself, or a larger copy (a freed); NULL if out of memory (a
 * kept). */
static void *room(void *a, size_t size, size_t n, size_t *cap)
{
	if (n < *cap)
		return a;
	size_t c = *cap ? *cap * 2 : 64;
	void *g = realloc(a, c * size);
	if (g)
		*cap = c;
	return g;
}

/* Appends the socket inodes pid's fds name to *o (*n of *cap). */
static int sockets_of(pid_t pid, owned **o, size_t *n, size_t *cap)
{
	char path[64], link[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return errno == ENOENT ? 0 : -errno; /* gone: nothing of it to dump */
	int e = 0;
	for (struct dirent *de; !e && (de = readdir(d));) {
		char fd[64 + 256];
		snprintf(fd, sizeof(fd), "%s/%s", path, de->d_name);
		ssize_t l = readlink(fd, link, sizeof(link) - 1);
		unsigned long ino;
		if (l <= 0)
			continue;
		link[l] = 0;
		if (sscanf(link, "socket:[%lu]", &ino) != 1)
			continue;
		owned *g = room(*o, sizeof(**o), *n, cap);
		if (!g) {
			e = -ENOMEM;
			break;
		}
		*o = g;
		g[(*n)++] = (owned){ ino, pid };
	}
	closedir(d);
	return e;
}

/* An address as /proc/net/tcp writes it (the words of the address in the
 * machine's byte order) into a[16], as IPv6. */
static void parse(const char *hex, int v6, unsigned char a[16])
{
	memset(a, 0, 16);
	if (!v6) {
		a[10] = a[11] = 0xff;
	}
	for (int w = 0; w < (v6 ? 4 : 1); w++) {
		char word[9] = "";
		memcpy(word, hex + 8 * w, 8);
		uint32_t x = (uint32_t)strtoul(word, NULL, 16);
		memcpy(a + (v6 ? 4 * w : 12), &x, 4);
	}
}

/* An address and port as text. */
static void show(const unsigned char a[16], unsigned port, char *out, size_t len)
{
	static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	int v4 = !memcmp(a, mapped, 12);
	char ip[INET6_ADDRSTRLEN] = "?";
	inet_ntop(v4 ? AF_INET : AF_INET6, v4 ? a + 12 : a, ip, sizeof(ip));
	snprintf(out, len, v4 ? "%s:%u" : "[%s]:%u", ip, port);
}

/* Appends the rows of /proc/PID/net/<file> to *c (*n of *cap). */
static int rows_of(pid_t pid, const char *file, int v6, conn **c, size_t *n, size_t *cap)
{
	char path[64], line[512];
	snprintf(path, sizeof(path), "/proc/%d/net/%s", (int)pid, file);
	FILE *f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? 0 : -errno; /* no IPv6 here, or pid gone */
	int e = 0;
	while (!e && fgets(line, sizeof(line), f)) {
		conn r = { 0 };
		char l[40], rm[40];
		if (sscanf(line, " %*u: %39[0-9A-Fa-f]:%x %39[0-9A-Fa-f]:%x %x %*s %*s %*s %*u %*u %lu", l, &r.lport, rm,
			   &r.rport, &r.state, &r.inode) != 6)
			continue; /* the header */
		parse(l, v6, r.local);
		parse(rm, v6, r.remote);
		conn *g = room(*c, sizeof(**c), *n, cap);
		if (!g) {
			e = -ENOMEM;
			break;
		}
		*c = g;
		g[(*n)++] = r;
	}
	fclose(f);
	return e;
}

int engine_tcp_outside(const phosimg_member *m, uint32_t n, char *what, size_t len)
{
	*what = 0;
	owned *o = NULL;
	conn *c = NULL;
	size_t no = 0, co = 0, nc = 0, cc = 0;
	int e = 0;
	for (uint32_t i = 0; i < n && !e; i++)
		e = sockets_of(m[i].pid, &o, &no, &co);
	if (!e && no && n) {
		qsort(o, no, sizeof(*o), by_inode);
		e = rows_of(m[0].pid, "tcp", 0, &c, &nc, &cc);
		if (!e)
			e = rows_of(m[0].pid, "tcp6", 1, &c, &nc, &cc);
	}
	int found = 0;
	for (size_t i = 0; i < nc && !e && !found; i++) {
		const owned *mine = find_owned(o, no, c[i].inode);
		if (!mine || c[i].state == TCP_LISTEN || c[i].state == TCP_CLOSE)
			continue;
		int inside = 0;
		for (size_t j = 0; j < nc && !inside; j++)
			inside = j != i && c[j].lport == c[i].rport && c[j].rport == c[i].lport &&
				 !memcmp(c[j].local, c[i].remote, 16) && !memcmp(c[j].remote, c[i].local, 16) &&
				 find_owned(o, no, c[j].inode);
		if (inside)
			continue;
		char l[64], r[64];
		show(c[i].local, c[i].lport, l, sizeof(l));
		show(c[i].remote, c[i].rport, r, sizeof(r));
		snprintf(what, len, "process %d has a TCP connection from %s to %s, outside the job", (int)mine->pid, l,
			 r);
		found = 1;
	}
	free(o);
	free(c);
	return e ? e : found;
}
