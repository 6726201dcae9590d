/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The jobs of phosfs_tcp_connection_inside_a_tree_survives_restore:
 *
 *   tcp_app server plain|reuse|dual
 *       listens on 127.0.0.1 (reuse: with SO_REUSEADDR; dual: on [::],
 *       dual-stack), forks a client that connects, sends 1, 2, 3, …
 *       every 10 ms and checks each answer (n * 3); the server checks
 *       each request follows the one before and prints "count N";
 *   tcp_app client PORT
 *       connects to 127.0.0.1:PORT and prints "count N" every 10 ms.
 *
 * Either prints a FAILED line and exits on a break. It is built without
 * the sanitizers even in a SANITIZE build: CRIU's restore of an ASan
 * process with TCP connections crashed it (SIGSEGV in the restore), and
 * what the test checks is phosfs and CRIU, not this program.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The server's listening socket on 127.0.0.1 (dual: on [::], taking
 * IPv4 clients too, as a dual-stack server does); its port into *port. */
static int listener(bool reuse, bool dual, int *port)
{
	int one = 1, zero = 0, l = socket(dual ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
	if (l < 0 || (reuse && setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one))) ||
	    (dual && setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero))))
		return -1;
	struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT };
	socklen_t al = dual ? sizeof(a6) : sizeof(a4);
	struct sockaddr *a = dual ? (struct sockaddr *)&a6 : (struct sockaddr *)&a4;
	if (bind(l, a, al) || listen(l, 1) || getsockname(l, a, &al))
		return -1;
	*port = ntohs(dual ? a6.sin6_port : a4.sin_port);
	return l;
}

static int tcp_app(bool reuse, bool dual)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int port = 0, l = listener(reuse, dual, &port);
	if (l < 0 && dual && (errno == EAFNOSUPPORT || errno == EADDRNOTAVAIL)) {
		printf("no IPv6\n");
		return 0;
	}
	if (l < 0) {
		printf("FAILED: cannot listen: %s\n", strerror(errno));
		return 1;
	}
	printf("port %d\n", port);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				 .sin_port = htons((uint16_t)port) };
	pid_t c = fork();
	if (c == 0) {
		int s = socket(AF_INET, SOCK_STREAM, 0);
		if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a))) {
			printf("FAILED: client cannot connect: %s\n", strerror(errno));
			_exit(1);
		}
		for (uint64_t n = 1;; n++) {
			uint64_t r;
			if (write(s, &n, sizeof(n)) != (ssize_t)sizeof(n) || read(s, &r, sizeof(r)) != (ssize_t)sizeof(r)) {
				printf("FAILED: client lost the connection at %llu: %s\n", (unsigned long long)n,
				       strerror(errno));
				_exit(1);
			}
			if (r != n * 3) {
				printf("FAILED: client got %llu for %llu\n", (unsigned long long)r, (unsigned long long)n);
				_exit(1);
			}
			usleep(10000);
		}
	}
	int s = accept(l, NULL, NULL);
	if (s < 0) {
		printf("FAILED: cannot accept: %s\n", strerror(errno));
		return 1;
	}
	for (uint64_t expect = 1;; expect++) {
		uint64_t n;
		ssize_t got = read(s, &n, sizeof(n));
		if (got != (ssize_t)sizeof(n)) {
			printf("FAILED: server lost the connection at %llu: %s\n", (unsigned long long)expect,
			       got < 0 ? strerror(errno) : "end of stream");
			return 1;
		}
		if (n != expect) {
			printf("FAILED: server got %llu, expected %llu\n", (unsigned long long)n,
			       (unsigned long long)expect);
			return 1;
		}
		uint64_t r = n * 3;
		if (write(s, &r, sizeof(r)) != (ssize_t)sizeof(r)) {
			printf("FAILED: server cannot answer %llu: %s\n", (unsigned long long)n, strerror(errno));
			return 1;
		}
		printf("count %llu\n", (unsigned long long)n);
	}
}

/* A job that connects to port on 127.0.0.1 (a peer outside it) and
 * counts while it stays connected. */
static int client_app(int port)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				 .sin_port = htons((uint16_t)port) };
	int s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a))) {
		printf("FAILED: cannot connect: %s\n", strerror(errno));
		return 1;
	}
	for (long n = 1;; n++) {
		printf("count %ld\n", n);
		usleep(10000);
	}
}

int main(int argc, char **argv)
{
	if (argc > 2 && !strcmp(argv[1], "server"))
		return tcp_app(!strcmp(argv[2], "reuse"), !strcmp(argv[2], "dual"));
	if (argc > 2 && !strcmp(argv[1], "client"))
		return client_app(atoi(argv[2]));
	fprintf(stderr, "usage: tcp_app server plain|reuse|dual | tcp_app client PORT\n");
	return 2;
}
