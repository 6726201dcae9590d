/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Closed connections that hold the TCP addresses of an image
 * (timewait.h).
 *
 * A job killed on this machine leaves each of its TCP connections in
 * TIME_WAIT for a minute (the end that closed first keeps it). A
 * listening socket that did not set SO_REUSEADDR, such as NCCL's
 * bootstrap's and torchrun's agent's, cannot bind its port again while
 * one of them holds it, so CRIU's restore of the job fails with
 * EADDRINUSE, and a restore right after a failure, the moment it is
 * wanted, would have to wait.
 *
 * Those sockets belong to the processes the restore brings back: they
 * are what is left of the very connections the image holds, which CRIU
 * restores in repair mode with their sequence numbers. So before CRIU
 * runs, each TIME_WAIT socket whose local address is one the image needs
 * is ended through the kernel's socket diagnostics (SOCK_DESTROY on a
 * NETLINK_SOCK_DIAG socket, as `ss -K` does; Linux ends TIME_WAIT
 * sockets that way since 6.x). The image's addresses are its inet
 * sockets in files.img (CRIU's inet_sk_entry: 3 family, 5 protocol,
 * 6 state, 7 and 8 the ports, 11 and 12 the addresses, each a list of
 * 32-bit words in memory order).
 *
 * A connection closed while its peer had not closed yet waits in
 * FIN_WAIT2 instead, owned by nobody, and holds its port the same way:
 * it is ended too. Nothing else is touched: a socket that a process owns
 * (an inode: a live listener, a connection of a running original, one
 * half closed with shutdown) stays, and CRIU's bind then fails and says
 * so. Only the kernel's answers are read (sender 0, the request's
 * sequence number).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "criu-image.h"
#include "timewait.h"

#define ISK_FAMILY 3
#define ISK_PROTO 5
#define ISK_STATE 6
#define ISK_SRC_PORT 7
#define ISK_DST_PORT 8
#define ISK_SRC_ADDR 11
#define ISK_DST_ADDR 12
#define STATE_LISTEN 10

/* One TCP socket of the image: its addresses as IPv6 ones (an IPv4
 * address as ::ffff:a.b.c.d). A listener matches any peer. */
typedef struct need {
	uint8_t local[16], remote[16];
	unsigned lport, rport;
	bool listens;
} need;

typedef struct needs {
	need *v;
	size_t n, cap;
} needs;

/* An address of family fam (words: its 32-bit words, n of them) as an
 * IPv6 one. */
static void as_v6(int fam, const uint32_t *words, int n, uint8_t out[16])
{
	memset(out, 0, 16);
	if (fam == AF_INET) {
		if (n < 1 || !words[0])
			return; /* any: stays :: */
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &words[0], 4);
	} else {
		for (int i = 0; i < n && i < 4; i++)
			memcpy(out + 4 * i, &words[i], 4);
	}
}

/* Appends the words of field f, of a repeated uint32 field (packed or
 * not), to w (n, at most 4). */
static bool words_of(const pb_item *f, uint32_t *w, int *n)
{
	if (f->wt == 0 && *n < 4)
		w[(*n)++] = (uint32_t)f->v;
	for (const uint8_t *r = f->body, *rend = f->body + f->len; f->wt == 2 && r < rend;) {
		uint64_t v;
		if (!pb_varint(&r, rend, &v))
			return false;
		if (*n < 4)
			w[(*n)++] = (uint32_t)v;
	}
	return true;
}

/* Makes room for one more element of `size` bytes in *v (n of them, cap
 * allocated). */
static int grow(void **v, size_t n, size_t *cap, size_t size)
{
	if (n < *cap)
		return 0;
	size_t c = *cap ? 2 * *cap : 16;
	void *p = realloc(*v, c * size);
	if (!p)
		return -ENOMEM;
	*v = p;
	*cap = c;
	return 0;
}

/* Takes one inet socket of files.img (body, len: its inet_sk_entry). */
static int take_inet(uint8_t *body, size_t len, void *arg)
{
	needs *ns = arg;
	uint64_t fam = 0, proto = 0, state = 0, sport = 0, dport = 0;
	uint32_t src[4], dst[4];
	int nsrc = 0, ndst = 0;
	for (const uint8_t *q = body, *end = body + len; q < end;) {
		pb_item it;
		if (!pb_next(&q, end, &it))
			return -EBADMSG;
		unsigned f = it.field;
		if (f == ISK_SRC_ADDR || f == ISK_DST_ADDR) {
			if (!words_of(&it, f == ISK_SRC_ADDR ? src : dst, f == ISK_SRC_ADDR ? &nsrc : &ndst))
				return -EBADMSG;
			continue;
		}
		uint64_t *to = f == ISK_FAMILY ? &fam : f == ISK_PROTO ? &proto : f == ISK_STATE ? &state :
			       f == ISK_SRC_PORT ? &sport : f == ISK_DST_PORT ? &dport : NULL;
		if (to && it.wt == 0)
			*to = it.v;
	}
	if (proto != IPPROTO_TCP || !sport || sport > 65535 || (fam != AF_INET && fam != AF_INET6))
		return 0;
	if (grow((void **)&ns->v, ns->n, &ns->cap, sizeof(*ns->v)))
		return -ENOMEM;
	need *d = &ns->v[ns->n++];
	*d = (need){ .lport = (unsigned)sport, .rport = (unsigned)dport, .listens = state == STATE_LISTEN };
	as_v6((int)fam, src, nsrc, d->local);
	as_v6((int)fam, dst, ndst, d->remote);
	return 0;
}

static bool any(const uint8_t a[16])
{
	static const uint8_t zero[16];
	return !memcmp(a, zero, 16);
}

/* Whether a closed socket (its addresses as IPv6 ones) holds an
 * address that one of ns needs. */
static bool needed(const needs *ns, const uint8_t local[16], unsigned lport, const uint8_t remote[16], unsigned rport)
{
	for (size_t i = 0; i < ns->n; i++) {
		const need *d = &ns->v[i];
		if (d->lport != lport || (!any(d->local) && memcmp(d->local, local, 16)))
			continue;
		if (d->listens || (d->rport == rport && !memcmp(d->remote, remote, 16)))
			return true;
	}
	return false;
}

/* The states of the sockets ended: closed, and owned by nobody. */
#define CLOSED_STATES ((1u << TCP_TIME_WAIT) | (1u << TCP_FIN_WAIT2))

typedef struct diag_req {
	struct nlmsghdr nlh;
	struct inet_diag_req_v2 r;
} diag_req;

/* Sends one request of type `type` for TCP sockets of family fam in
 * CLOSED_STATES (id: the one socket, for SOCK_DESTROY). */
static int ask(int fd, int type, int fam, const struct inet_diag_sockid *id, unsigned seq)
{
	diag_req q = {
		.nlh = { .nlmsg_len = sizeof(q), .nlmsg_type = (unsigned short)type, .nlmsg_seq = seq,
			 .nlmsg_flags = NLM_F_REQUEST | (id ? NLM_F_ACK : NLM_F_DUMP) },
		.r = { .sdiag_family = (unsigned char)fam, .sdiag_protocol = IPPROTO_TCP,
		       .idiag_states = CLOSED_STATES },
	};
	if (id)
		q.r.id = *id;
	struct sockaddr_nl k = { .nl_family = AF_NETLINK };
	return sendto(fd, &q, sizeof(q), 0, (struct sockaddr *)&k, sizeof(k)) == (ssize_t)sizeof(q) ? 0 : -errno;
}

/* The sockets of a dump to end (ids, family each). */
/* A socket of a dump to end. */
typedef struct victim {
	struct inet_diag_sockid id;
	int fam;
} victim;

typedef struct victims {
	victim *v;
	size_t n, cap;
} victims;


/* Receives one datagram from the kernel (sender 0) into buf (cap bytes);
 * its length, or -errno (-EMSGSIZE: cut short). */
static ssize_t from_kernel(int fd, void *buf, size_t cap)
{
	for (;;) {
		struct sockaddr_nl k;
		socklen_t kl = sizeof(k);
		ssize_t r = recvfrom(fd, buf, cap, MSG_TRUNC, (struct sockaddr *)&k, &kl);
		if (r < 0)
			return -errno;
		if (kl == sizeof(k) && k.nl_family == AF_NETLINK && k.nl_pid == 0)
			return (size_t)r > cap ? -EMSGSIZE : r;
	}
}

/* The error an NLMSG_ERROR message h carries (0: an ack). */
static int error_of(const struct nlmsghdr *h)
{
	if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct nlmsgerr)))
		return -EPROTO;
	const struct nlmsgerr *err = NLMSG_DATA(h);
	return err->error;
}

/* Lists the closed sockets of family fam, owned by nobody, that ns needs
 * into vs. */
static int list(int fd, int fam, const needs *ns, victims *vs, unsigned seq)
{
	int e = ask(fd, SOCK_DIAG_BY_FAMILY, fam, NULL, seq);
	_Alignas(struct nlmsghdr) char buf[32768];
	for (bool done = false; !e && !done;) {
		ssize_t r = from_kernel(fd, buf, sizeof(buf));
		if (r < 0)
			return (int)r;
		int left = (int)r;
		for (struct nlmsghdr *h = (struct nlmsghdr *)buf; !e && !done && NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
			if (h->nlmsg_seq != seq)
				continue;
			if (h->nlmsg_type == NLMSG_DONE) {
				done = true;
			} else if (h->nlmsg_type == NLMSG_ERROR) {
				e = error_of(h);
				e = e ? e : -EPROTO;
			} else if (h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct inet_diag_msg))) {
				const struct inet_diag_msg *m = NLMSG_DATA(h);
				uint8_t local[16], remote[16];
				as_v6(m->idiag_family, m->id.idiag_src, 4, local);
				as_v6(m->idiag_family, m->id.idiag_dst, 4, remote);
				bool want = (CLOSED_STATES & (1u << m->idiag_state)) && m->idiag_inode == 0 &&
					    needed(ns, local, ntohs(m->id.idiag_sport), remote, ntohs(m->id.idiag_dport));
				if (want && !(e = grow((void **)&vs->v, vs->n, &vs->cap, sizeof(*vs->v))))
					vs->v[vs->n++] = (victim){ m->id, m->idiag_family };
			}
		}
	}
	return e;
}

/* Ends one socket; one that ended meanwhile (-ENOENT) counts as ended. */
static int end_one(int fd, const struct inet_diag_sockid *id, int fam, unsigned seq)
{
	int e = ask(fd, SOCK_DESTROY, fam, id, seq);
	_Alignas(struct nlmsghdr) char buf[512];
	while (!e) {
		ssize_t r = from_kernel(fd, buf, sizeof(buf));
		if (r < 0)
			return (int)r;
		const struct nlmsghdr *h = (const struct nlmsghdr *)buf;
		if (!NLMSG_OK(h, (int)r))
			return -EPROTO;
		if (h->nlmsg_seq != seq)
			continue;
		if (h->nlmsg_type != NLMSG_ERROR)
			return -EPROTO;
		e = error_of(h);
		return e == -ENOENT ? 0 : e;
	}
	return e;
}

int engine_timewait_end(const char *dir, int *ended, perr *er)
{
	*ended = 0;
	uint8_t *buf = NULL;
	size_t size = 0;
	int e = criu_files_read(dir, &buf, &size);
	if (e == -ENOENT)
		return 0;
	if (e)
		return pr_err(er, e, "cannot read %s/files.img: %s", dir, strerror(-e));
	needs ns = { 0 };
	e = criu_files_each(buf, size, CRIU_FILE_INET, take_inet, &ns);
	free(buf);
	if (e) {
		free(ns.v);
		return e == -EBADMSG ? pr_err(er, e, "%s/files.img is not CRIU's list of files", dir)
				     : pr_err(er, e, "out of memory");
	}
	if (!ns.n)
		return 0;
	victims vs = { 0 };
	int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	/* The kernel answers at once; a second is a deadline, not a wait. */
	struct timeval tv = { .tv_sec = 1 };
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0)
		e = -errno;
	unsigned seq = 1;
	if (!e)
		e = list(fd, AF_INET, &ns, &vs, seq++);
	if (!e)
		e = list(fd, AF_INET6, &ns, &vs, seq++);
	if (e)
		pr_err(er, e, "cannot list this machine's closed TCP connections (socket diagnostics): %s",
		       strerror(-e));
	for (size_t i = 0; !e && i < vs.n; i++) {
		e = end_one(fd, &vs.v[i].id, vs.v[i].fam, seq++);
		if (!e)
			(*ended)++;
		else
			pr_err(er, e, "cannot end a closed connection on port %u that the image needs: %s%s",
			       ntohs(vs.v[i].id.idiag_sport), strerror(-e),
			       e == -EPERM ? " (it takes CAP_NET_ADMIN)"
			       : e == -EOPNOTSUPP ? " (this kernel cannot end sockets: CONFIG_INET_DIAG_DESTROY)"
						   : "");
	}
	if (fd >= 0)
		close(fd);
	free(vs.v);
	free(ns.v);
	return e;
}
