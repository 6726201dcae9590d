/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A job killed on this machine leaves its TCP connections in TIME_WAIT
 * for a minute, and a listening socket without SO_REUSEADDR (NCCL's
 * bootstrap's, torchrun's agent's) cannot bind its port again meanwhile:
 * a restore right after the kill would fail. engine_timewait_end ends
 * the TIME_WAIT sockets that hold an address the image needs, and only
 * those (engine/timewait.c):
 *
 *   - a TIME_WAIT socket on the port an image's socket listens on is
 *     ended, and the port binds again; one on a port the image does not
 *     need stays;
 *   - a listener of the image on any address (0.0.0.0) takes its port on
 *     127.0.0.1 too;
 *   - for a connection of the image, only the TIME_WAIT socket with both
 *     its ends is ended;
 *   - a live listener on a port of the image is left alone, and so is a
 *     connection a process still owns, half closed (FIN_WAIT2);
 *   - without files.img there is nothing to do; a corrupt one is refused
 *     with an error, never a crash (the tests also run under ASan).
 *
 * Needs root (CAP_NET_ADMIN) and a kernel that ends sockets
 * (CONFIG_INET_DIAG_DESTROY); skips without them.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../engine/timewait.h"
#include "criu_files_test.h"

#define LISTEN 10
#define ESTABLISHED 1

/* A file_entry holding an inet_sk_entry: TCP over IPv4, in `state`,
 * from src:sport to dst:dport (addresses in network order). */
static void inet_entry(buf *out, uint32_t id, int state, uint32_t src, unsigned sport, uint32_t dst, unsigned dport)
{
	buf sk = { .n = 0 };
	field_varint(&sk, 1, id);
	field_varint(&sk, 2, 2000 + id);
	field_varint(&sk, 3, AF_INET);
	field_varint(&sk, 4, SOCK_STREAM);
	field_varint(&sk, 5, IPPROTO_TCP);
	field_varint(&sk, 6, (uint64_t)state);
	field_varint(&sk, 7, sport);
	field_varint(&sk, 8, dport);
	field_varint(&sk, 9, 2);
	field_varint(&sk, 10, state == LISTEN ? 128 : 0);
	field_varint(&sk, 11, src);
	field_varint(&sk, 12, dst);
	file_entry(out, 2, id, 4, &sk);
}

static uint32_t loopback(void)
{
	return htonl(INADDR_LOOPBACK);
}

static unsigned port_of(int fd)
{
	struct sockaddr_in a;
	socklen_t al = sizeof(a);
	return getsockname(fd, (struct sockaddr *)&a, &al) == 0 ? ntohs(a.sin_port) : 0;
}

/* A listener on 127.0.0.1, without SO_REUSEADDR; its port into *port. */
static int listener(unsigned *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = loopback() };
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 4))
		bail("cannot listen on 127.0.0.1: %s", strerror(errno));
	*port = port_of(l);
	return l;
}

/* A connection to a new listener, closed by the server's end first
 * (server_first) or the client's: that end stays in TIME_WAIT. The
 * listener's port into *port, the client's into *cport. */
static void closed_pair(bool server_first, unsigned *port, unsigned *cport)
{
	int l = listener(port);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = loopback(), .sin_port = htons((uint16_t)*port) };
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof(a)))
		bail("cannot connect: %s", strerror(errno));
	int s = accept(l, NULL, NULL);
	if (s < 0)
		bail("cannot accept: %s", strerror(errno));
	*cport = port_of(c);
	close(server_first ? s : c);
	usleep(20000);
	close(server_first ? c : s);
	close(l);
	usleep(50000);
}

/* How many TCP sockets in TIME_WAIT have local port lport (and, if
 * rport, remote port rport). */
static int time_waits(unsigned lport, unsigned rport)
{
	FILE *f = fopen("/proc/net/tcp", "r");
	char line[512];
	int n = 0;
	while (f && fgets(line, sizeof(line), f)) {
		unsigned la, lp, ra, rp, st;
		if (sscanf(line, " %*d: %x:%x %x:%x %x", &la, &lp, &ra, &rp, &st) == 5 && st == 6 && lp == lport &&
		    (!rport || rp == rport))
			n++;
	}
	if (f)
		fclose(f);
	return n;
}

/* Whether a socket with SO_REUSEADDR (as CRIU's restore makes them) can
 * bind 127.0.0.1:port and listen. */
static bool binds(unsigned port)
{
	int one = 1;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = loopback(), .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok_ = fd >= 0 && !setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) &&
		   !bind(fd, (struct sockaddr *)&a, sizeof(a)) && !listen(fd, 1);
	if (fd >= 0)
		close(fd);
	return ok_;
}

int main(void)
{
	if (geteuid() != 0)
		skip_all("needs root: ending sockets takes CAP_NET_ADMIN");
	char dir[] = "/tmp/phos-timewait-XXXXXX";
	if (!mkdtemp(dir))
		bail("mkdtemp: %s", strerror(errno));
	char path[600];
	snprintf(path, sizeof(path), "%s/files.img", dir);
	perr er = { 0 };
	int ended = -1;

	/* 1. The image listens on port p, which a closed connection holds;
	 * another closed connection holds port q, which it does not need. */
	unsigned p, pc, q, qc;
	closed_pair(true, &p, &pc);
	closed_pair(true, &q, &qc);
	if (time_waits(p, 0) != 1 || binds(p))
		bail("no TIME_WAIT socket holds port %u after its connection closed (%d)", p, time_waits(p, 0));
	buf img;
	files_magic(&img);
	inet_entry(&img, 1, LISTEN, loopback(), p, 0, 0);
	write_file(path, img.p, img.n);
	int e = engine_timewait_end(dir, &ended, &er);
	if (e == -EOPNOTSUPP || e == -EPERM)
		skip_all("this kernel does not end TIME_WAIT sockets here");
	plan(6);
	ok(!e && ended == 1 && time_waits(p, 0) == 0 && binds(p),
	   "the closed connection that held the image's listening port is ended, and the port binds again "
	   "(e %d, ended %d: %s)", e, ended, *er.msg ? er.msg : "no error");
	ok(time_waits(q, 0) == 1 && !binds(q), "one on a port the image does not need stays");

	/* 2. A listener of the image on 0.0.0.0 takes its port on 127.0.0.1. */
	files_magic(&img);
	inet_entry(&img, 1, LISTEN, 0, q, 0, 0);
	write_file(path, img.p, img.n);
	e = engine_timewait_end(dir, &ended, &er);
	ok(!e && ended == 1 && time_waits(q, 0) == 0 && binds(q),
	   "a listener of the image on 0.0.0.0 frees its port on 127.0.0.1 (e %d, ended %d)", e, ended);

	/* 3. A connection of the image: closed by its client first, the
	 * client's end holds (client port, r). Only the socket with both its
	 * ends is ended. */
	unsigned r, rc;
	closed_pair(false, &r, &rc);
	files_magic(&img);
	inet_entry(&img, 1, ESTABLISHED, loopback(), rc, loopback(), r + 1);
	write_file(path, img.p, img.n);
	int e1 = engine_timewait_end(dir, &ended, &er), ended1 = ended;
	int kept = time_waits(rc, r);
	files_magic(&img);
	inet_entry(&img, 1, ESTABLISHED, loopback(), rc, loopback(), r);
	write_file(path, img.p, img.n);
	e = engine_timewait_end(dir, &ended, &er);
	ok(!e1 && ended1 == 0 && kept == 1 && !e && ended == 1 && time_waits(rc, r) == 0,
	   "for a connection of the image, only the TIME_WAIT socket with both its ends is ended "
	   "(other peer: ended %d, kept %d; its own: ended %d)", ended1, kept, ended);

	/* 4. A live listener on a port of the image is not touched. */
	unsigned lp;
	int live = listener(&lp);
	files_magic(&img);
	inet_entry(&img, 1, LISTEN, loopback(), lp, 0, 0);
	write_file(path, img.p, img.n);
	e = engine_timewait_end(dir, &ended, &er);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = loopback(), .sin_port = htons((uint16_t)lp) };
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool still = c >= 0 && connect(c, (struct sockaddr *)&a, sizeof(a)) == 0;
	int s = still ? accept(live, NULL, NULL) : -1;
	unsigned cp = c >= 0 ? port_of(c) : 0;
	/* c half closed: FIN_WAIT2, still c's. */
	if (c >= 0)
		shutdown(c, SHUT_WR);
	usleep(50000);
	files_magic(&img);
	inet_entry(&img, 1, LISTEN, loopback(), lp, 0, 0);
	inet_entry(&img, 2, ESTABLISHED, loopback(), cp, loopback(), lp);
	write_file(path, img.p, img.n);
	int e2 = engine_timewait_end(dir, &ended, &er), ended2 = ended;
	struct tcp_info ti = { 0 };
	socklen_t tl = sizeof(ti);
	bool owned = c >= 0 && getsockopt(c, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 && ti.tcpi_state == TCP_FIN_WAIT2;
	ok(!e && ended == 0 && still && !e2 && ended2 == 0 && owned,
	   "a live listener on a port of the image is left alone, and a connection half closed that a process "
	   "owns (FIN_WAIT2) too (ended %d, %d; state %u)", ended, ended2, ti.tcpi_state);
	if (s >= 0)
		close(s);
	if (c >= 0)
		close(c);
	close(live);

	/* 5. No files.img; a corrupt one. */
	unlink(path);
	e = engine_timewait_end(dir, &ended, &er);
	bool none = !e && ended == 0;
	files_magic(&img);
	inet_entry(&img, 1, LISTEN, loopback(), 1, 0, 0);
	inet_entry(&img, 2, ESTABLISHED, loopback(), 2, loopback(), 3);
	srand(7);
	int bad = 0, fine = 0;
	for (int i = 0; i < 2000; i++) {
		buf cb = corrupted(&img);
		write_file(path, cb.p, cb.n);
		memset(&er, 0, sizeof(er));
		e = engine_timewait_end(dir, &ended, &er);
		if (e == -EBADMSG && *er.msg)
			bad++;
		else if (!e)
			fine++;
	}
	ok(none && bad + fine == 2000,
	   "without files.img there is nothing to end; 2000 corrupt ones: %d refused (EBADMSG, with a message), "
	   "%d read", bad, fine);
	snprintf(path, sizeof(path), "rm -rf %s", dir);
	if (system(path) != 0)
		diag("cannot remove %s", dir);
	return done();
}
