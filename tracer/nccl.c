/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * NCCL, interposed: every collective, point-to-point and group call,
 * communicator creation, split and destruction, and buffer and window
 * registration passes through here, however the application reaches
 * libnccl (linked: libphos.so is preloaded; dlsym: hooks.c hands out these
 * wrappers and notes the real function, nccl_note_real).
 *
 * Each communicator has a record: a name every rank gives it alike (a
 * hash of its ncclUniqueId, or of its parent's name, the split's number
 * on the parent and its colour), its rank, and the operations it has
 * issued. A group counts once for each communicator it touches. A call
 * NCCL makes to its own API from inside another (ncclBcast calls
 * ncclBroadcast) is not counted again. phosfs reads the counts with
 * WIRE_NCCL.
 *
 * A checkpoint's cut (doc/ARCHITECTURE.md, "NCCL jobs"): CUT holds every
 * operation back and answers the counts; TARGETS lets each communicator
 * run up to its target, the largest count any of its ranks reached, and
 * answers once all have and every counted call has returned (every group
 * ended): their kernels are launched. The operations stay held until the
 * process runs on (nccl_cut_end).
 *
 * The types are NCCL's ABI, declared here: the tracer builds without
 * NCCL's headers.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tracer.h"

typedef struct ncclComm *ncclComm_t;
typedef struct ncclWindow *ncclWindow_t;
typedef struct ncclConfig ncclConfig_t; /* passed through, never read */
typedef struct {
	char internal[128]; /* NCCL_UNIQUE_ID_BYTES */
} ncclUniqueId;
typedef int ncclResult_t;
typedef int ncclDataType_t;
typedef int ncclRedOp_t;
typedef void *cudaStream_t;

#define NCCL_INTERNAL_ERROR 3 /* ncclInternalError: NCCL is not there */
#define SPLIT_NOCOLOR (-1)    /* NCCL_SPLIT_NOCOLOR */

typedef struct comm_rec {
	ncclComm_t h;
	uint64_t id;
	uint64_t count;
	uint64_t mark; /* the group that counted it last */
	uint32_t splits; /* splits made from it, in order */
	int32_t rank, nranks;
	uint32_t flags; /* WIRE_NCCL_* */
	uint64_t target; /* the cut's, when has_target */
	bool has_target;
} comm_rec;

/* Guarded by lock: comms, ncomms, cap, reals, cut, flying. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static comm_rec *comms;
static uint32_t ncomms, cap;

/* Operations counted whose kernels may not be launched yet: a call
 * counted and not returned, or a group with a counted operation that has
 * not ended (NCCL launches a group's kernels in ncclGroupEnd). A cut is
 * reached only once this is 0: a rank whose count is at its target but
 * whose kernel is still to come would leave its peers waiting for it on
 * the device, and the park would then wait for them in vain. */
static uint32_t flying;

/* A checkpoint's cut: while active, an operation waits unless its
 * communicator has a target it has not reached. `changed` (on
 * CLOCK_MONOTONIC) wakes both the callers waiting and the control thread
 * waiting for the targets. */
static struct {
	bool active, targets_known;
	pthread_cond_t changed;
} cut;
static pthread_once_t cut_once = PTHREAD_ONCE_INIT;

static void cut_init(void)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&cut.changed, &a);
	pthread_condattr_destroy(&a);
}

#define REALS 64
static struct {
	char name[40];
	void *fn;
} reals[REALS];

/* Per thread: inside one of our wrappers (NCCL calling itself), and the
 * group it is in (depth, and the number of its outermost start). */
static _Thread_local int inside __attribute__((tls_model("initial-exec")));
static _Thread_local int group_depth __attribute__((tls_model("initial-exec")));
static _Thread_local uint64_t group_token __attribute__((tls_model("initial-exec")));
static _Thread_local bool group_flying __attribute__((tls_model("initial-exec")));
static atomic_ullong groups;

/* The library the application's NCCL functions came from through dlsym
 * (perhaps loaded RTLD_LOCAL): NCCL's calls to its own API reach these
 * wrappers, whose real functions are looked up there. Guarded by lock. */
static void *library;

void nccl_note_real(const char *name, void *fn)
{
	Dl_info at;
	void *h = dladdr(fn, &at) && at.dli_fname ? dlopen(at.dli_fname, RTLD_NOW | RTLD_NOLOAD) : NULL;
	pthread_mutex_lock(&lock);
	if (h && !library)
		library = h;
	else if (h)
		dlclose(h);
	int i = 0;
	while (i < REALS && reals[i].fn && strcmp(reals[i].name, name))
		i++;
	if (i < REALS && strlen(name) < sizeof(reals[i].name)) {
		strcpy(reals[i].name, name);
		reals[i].fn = fn;
	}
	pthread_mutex_unlock(&lock);
}

/* The application's NCCL function name: the one dlsym gave, else the next
 * definition after libphos.so, else the one in the library dlsym found
 * another in. */
static void *real_of(const char *name)
{
	void *fn = NULL;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < REALS && reals[i].fn && !fn; i++)
		if (!strcmp(reals[i].name, name))
			fn = reals[i].fn;
	void *lib = library;
	pthread_mutex_unlock(&lock);
	if (!fn)
		fn = tr_real_next(name);
	return fn ? fn : lib ? tr_dlsym_real(lib, name) : NULL;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

#define FNV_BASIS 0xcbf29ce484222325ull

static uint64_t id_of_unique(const ncclUniqueId *u)
{
	return fnv(FNV_BASIS, u->internal, sizeof(u->internal));
}

/* The record of h; lock held. NULL if unknown. */
static comm_rec *find(ncclComm_t h)
{
	for (uint32_t i = 0; i < ncomms; i++)
		if (comms[i].h == h)
			return &comms[i];
	return NULL;
}

/* Notes a new communicator h (lock held). */
static void add(ncclComm_t h, uint64_t id, int rank, int nranks, uint32_t flags)
{
	comm_rec *c = find(h);
	if (!c && ncomms == cap) {
		uint32_t n = cap ? cap * 2 : 16;
		comm_rec *v = realloc(comms, n * sizeof(*v));
		if (!v)
			return; /* then its operations go uncounted: the cut refuses it */
		comms = v;
		cap = n;
	}
	if (!c)
		c = &comms[ncomms++];
	*c = (comm_rec){ .h = h, .id = id, .rank = rank, .nranks = nranks, .flags = flags };
}

static void note(ncclComm_t h, uint64_t id, int rank, int nranks, uint32_t flags)
{
	pthread_mutex_lock(&lock);
	add(h, id, rank, nranks, flags);
	pthread_mutex_unlock(&lock);
}

static void forget(ncclComm_t h)
{
	pthread_mutex_lock(&lock);
	comm_rec *c = find(h);
	if (c)
		*c = comms[--ncomms];
	pthread_mutex_unlock(&lock);
}

/* Whether an operation on c must wait for the cut (lock held). */
static bool held_back(const comm_rec *c)
{
	return cut.active && (!cut.targets_known || !c->has_target || c->count >= c->target);
}

/* One operation on h: counted once per group; during a cut it waits
 * until its communicator may go on (an operation of a group waits
 * before the group is issued). Returns whether the caller must land()
 * once the call returns (a call outside a group that was counted). */
static bool count(ncclComm_t h)
{
	pthread_once(&cut_once, cut_init);
	pthread_mutex_lock(&lock);
	bool lands = false;
	comm_rec *c = find(h);
	if (!c) {
		add(h, 0, -1, 0, WIRE_NCCL_UNNAMED); /* made before we saw it */
		c = find(h);
	}
	if (c && (!group_depth || c->mark != group_token)) {
		/* comms may move while we wait: found again each time. A
		 * group held here has launched nothing, and launches after
		 * the checkpoint: it does not keep the cut from being reached
		 * meanwhile. */
		bool aside = false;
		while (c && held_back(c)) {
			if (group_flying && !aside) {
				aside = true;
				if (!--flying)
					pthread_cond_broadcast(&cut.changed);
			}
			pthread_cond_wait(&cut.changed, &lock);
			c = find(h);
		}
		if (aside)
			flying++;
		if (c) {
			c->count++;
			c->mark = group_depth ? group_token : 0;
			if (!group_depth)
				lands = true, flying++;
			else if (!group_flying)
				group_flying = true, flying++;
		}
		pthread_cond_broadcast(&cut.changed);
	}
	pthread_mutex_unlock(&lock);
	return lands;
}

/* A counted call, or a group with counted operations, has returned: its
 * kernels are launched. */
static void land(void)
{
	pthread_mutex_lock(&lock);
	if (flying && !--flying)
		pthread_cond_broadcast(&cut.changed);
	pthread_mutex_unlock(&lock);
}

void nccl_forked(void)
{
	/* Only the thread that forked is here: its group alone can be open. */
	pthread_mutex_init(&lock, NULL);
	flying = group_flying ? 1 : 0;
	cut.active = false;
}

int nccl_cut_begin(wire_nccl_comm **out, size_t *n)
{
	pthread_once(&cut_once, cut_init);
	pthread_mutex_lock(&lock);
	cut.active = true;
	cut.targets_known = false;
	for (uint32_t i = 0; i < ncomms; i++)
		comms[i].has_target = false;
	pthread_mutex_unlock(&lock);
	return nccl_list(out, n);
}

int nccl_cut_reach(const wire_nccl_target *t, size_t n, uint64_t deadline, char *why, size_t len)
{
	pthread_once(&cut_once, cut_init);
	struct timespec ts = { (time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u) };
	pthread_mutex_lock(&lock);
	for (size_t k = 0; k < n; k++)
		for (uint32_t i = 0; i < ncomms; i++)
			if (comms[i].id == t[k].id) {
				comms[i].target = t[k].target;
				comms[i].has_target = true;
			}
	cut.targets_known = true;
	pthread_cond_broadcast(&cut.changed);
	int e = 0;
	for (;;) {
		const comm_rec *short_of = NULL;
		for (uint32_t i = 0; i < ncomms && !short_of; i++)
			if (comms[i].has_target && comms[i].count < comms[i].target)
				short_of = &comms[i];
		if (!short_of && !flying)
			break;
		if (e == ETIMEDOUT) {
			if (short_of)
				snprintf(why, len, "its NCCL communicator %016llx is at operation %llu of %llu",
					 (unsigned long long)short_of->id, (unsigned long long)short_of->count,
					 (unsigned long long)short_of->target);
			else
				snprintf(why, len, "%u of its NCCL calls or groups have not returned", flying);
			pthread_mutex_unlock(&lock);
			return -ETIMEDOUT;
		}
		e = pthread_cond_timedwait(&cut.changed, &lock, &ts);
	}
	pthread_mutex_unlock(&lock);
	return 0;
}

void nccl_cut_end(void)
{
	pthread_once(&cut_once, cut_init);
	pthread_mutex_lock(&lock);
	if (cut.active) {
		cut.active = false;
		pthread_cond_broadcast(&cut.changed);
	}
	pthread_mutex_unlock(&lock);
}

/* The rank and size of a new communicator, as NCCL says them. */
static void shape(ncclComm_t h, int *rank, int *nranks)
{
	ncclResult_t (*user_rank)(ncclComm_t, int *) = (ncclResult_t(*)(ncclComm_t, int *))real_of("ncclCommUserRank");
	ncclResult_t (*size)(ncclComm_t, int *) = (ncclResult_t(*)(ncclComm_t, int *))real_of("ncclCommCount");
	*rank = -1;
	*nranks = 0;
	if (user_rank)
		user_rank(h, rank);
	if (size)
		size(h, nranks);
}

/* Declares real, the application's `name`; a call with no NCCL behind it
 * fails as NCCL would. */
#define NCCL_REAL(name, params)                                   \
	static ncclResult_t(*real) params;                        \
	if (!real)                                                \
		*(void **)&real = real_of(#name);                 \
	if (!real)                                                \
		return NCCL_INTERNAL_ERROR

/* A collective or point-to-point call on comm: counted, unless NCCL
 * makes it from inside another. */
#define NCCL_OP(name, params, args, comm)                    \
	TR_EXPORT ncclResult_t name params;                   \
	TR_EXPORT ncclResult_t name params                    \
	{                                                     \
		NCCL_REAL(name, params);                      \
		if (inside || !tr_enabled())                  \
			return real args;                     \
		inside++;                                     \
		bool lands_ = count(comm);                    \
		ncclResult_t res_ = real args;                \
		if (lands_)                                   \
			land();                               \
		inside--;                                     \
		return res_;                                  \
	}

NCCL_OP(ncclAllReduce,
	(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t st),
	(s, r, n, t, op, c, st), c)
NCCL_OP(ncclBroadcast, (const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st),
	(s, r, n, t, root, c, st), c)
NCCL_OP(ncclBcast, (void *b, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st),
	(b, n, t, root, c, st), c)
NCCL_OP(ncclReduce,
	(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t c, cudaStream_t st),
	(s, r, n, t, op, root, c, st), c)
NCCL_OP(ncclAllGather, (const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st),
	(s, r, n, t, c, st), c)
NCCL_OP(ncclReduceScatter,
	(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t st),
	(s, r, n, t, op, c, st), c)
NCCL_OP(ncclAlltoAll, (const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st),
	(s, r, n, t, c, st), c)
NCCL_OP(ncclGather, (const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st),
	(s, r, n, t, root, c, st), c)
NCCL_OP(ncclScatter, (const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st),
	(s, r, n, t, root, c, st), c)
NCCL_OP(ncclSend, (const void *s, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st),
	(s, n, t, peer, c, st), c)
NCCL_OP(ncclRecv, (void *r, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st),
	(r, n, t, peer, c, st), c)

TR_EXPORT ncclResult_t ncclGroupStart(void)
{
	NCCL_REAL(ncclGroupStart, (void));
	if (!inside && tr_enabled() && group_depth++ == 0)
		group_token = atomic_fetch_add(&groups, 1) + 1;
	return real();
}

TR_EXPORT ncclResult_t ncclGroupEnd(void)
{
	NCCL_REAL(ncclGroupEnd, (void));
	if (inside || !tr_enabled() || group_depth <= 0)
		return real();
	bool outermost = --group_depth == 0;
	ncclResult_t r = real();
	if (outermost && group_flying) {
		group_flying = false;
		land();
	}
	return r;
}

/* Runs a creation call (expr, into *out) inside, then names the new
 * communicator with id. */
#define CREATE(expr, out, id, flags)                      \
	do {                                              \
		inside++;                                 \
		ncclResult_t r_ = (expr);                 \
		inside--;                                 \
		if (r_ == 0 && (out) && *(out)) {         \
			int rank_, n_;                    \
			shape(*(out), &rank_, &n_);       \
			note(*(out), (id), rank_, n_, (flags)); \
		}                                         \
		return r_;                                \
	} while (0)

TR_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	NCCL_REAL(ncclCommInitRank, (ncclComm_t *, int, ncclUniqueId, int));
	if (inside || !tr_enabled())
		return real(comm, nranks, id, rank);
	CREATE(real(comm, nranks, id, rank), comm, id_of_unique(&id), 0);
}

TR_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
					      ncclConfig_t *config)
{
	NCCL_REAL(ncclCommInitRankConfig, (ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *));
	if (inside || !tr_enabled())
		return real(comm, nranks, id, rank, config);
	CREATE(real(comm, nranks, id, rank, config), comm, id_of_unique(&id), 0);
}

TR_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t *comm, int nranks, int rank, int nid, ncclUniqueId *ids,
						ncclConfig_t *config)
{
	NCCL_REAL(ncclCommInitRankScalable, (ncclComm_t *, int, int, int, ncclUniqueId *, ncclConfig_t *));
	if (inside || !tr_enabled() || nid < 1 || !ids)
		return real(comm, nranks, rank, nid, ids, config);
	CREATE(real(comm, nranks, rank, nid, ids, config), comm, id_of_unique(&ids[0]), 0);
}

TR_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comms_out, int ndev, const int *devs)
{
	NCCL_REAL(ncclCommInitAll, (ncclComm_t *, int, const int *));
	if (inside || !tr_enabled())
		return real(comms_out, ndev, devs);
	inside++;
	ncclResult_t r = real(comms_out, ndev, devs);
	inside--;
	/* One process holds every rank: the names need only be its own. */
	static atomic_uint alls;
	uint64_t base = fnv(FNV_BASIS, "all", 3) ^ atomic_fetch_add(&alls, 1);
	for (int i = 0; r == 0 && comms_out && i < ndev; i++)
		note(comms_out[i], fnv(base, &i, sizeof(i)), i, ndev, 0);
	return r;
}

/* The name of the split of parent numbered by its splits so far, with
 * colour; the parent's count of splits goes up, in every rank alike. */
static uint64_t split_id(ncclComm_t parent, int color)
{
	pthread_mutex_lock(&lock);
	comm_rec *p = find(parent);
	uint64_t id = 0;
	if (p) {
		uint32_t k = p->splits++;
		id = fnv(fnv(fnv(p->id, "split", 5), &k, sizeof(k)), &color, sizeof(color));
	}
	pthread_mutex_unlock(&lock);
	return id;
}

TR_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *out, ncclConfig_t *config)
{
	NCCL_REAL(ncclCommSplit, (ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *));
	if (inside || !tr_enabled())
		return real(comm, color, key, out, config);
	uint64_t id = split_id(comm, color);
	CREATE(real(comm, color, key, out, config), out, id, id ? 0 : WIRE_NCCL_UNNAMED);
}

TR_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int *exclude, int nexclude, ncclComm_t *out,
				      ncclConfig_t *config, int flags)
{
	NCCL_REAL(ncclCommShrink, (ncclComm_t, int *, int, ncclComm_t *, ncclConfig_t *, int));
	if (inside || !tr_enabled())
		return real(comm, exclude, nexclude, out, config, flags);
	uint64_t id = split_id(comm, SPLIT_NOCOLOR - 1);
	CREATE(real(comm, exclude, nexclude, out, config, flags), out, id, id ? 0 : WIRE_NCCL_UNNAMED);
}

/* A call that ends comm: its record goes. */
#define NCCL_END(name)                                    \
	TR_EXPORT ncclResult_t name(ncclComm_t comm);     \
	TR_EXPORT ncclResult_t name(ncclComm_t comm)      \
	{                                                 \
		NCCL_REAL(name, (ncclComm_t));            \
		if (inside || !tr_enabled())              \
			return real(comm);                \
		inside++;                                 \
		ncclResult_t r = real(comm);              \
		inside--;                                 \
		forget(comm);                             \
		return r;                                 \
	}
NCCL_END(ncclCommDestroy)
NCCL_END(ncclCommAbort)

TR_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
	NCCL_REAL(ncclCommFinalize, (ncclComm_t));
	inside++;
	ncclResult_t r = real(comm);
	inside--;
	return r;
}

/* Registrations pass through (counted nowhere): a later cut keeps them,
 * since no communicator is made again. */
TR_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buf, size_t size, void **handle)
{
	NCCL_REAL(ncclCommRegister, (const ncclComm_t, void *, size_t, void **));
	inside++;
	ncclResult_t r = real(comm, buf, size, handle);
	inside--;
	return r;
}

TR_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle)
{
	NCCL_REAL(ncclCommDeregister, (const ncclComm_t, void *));
	inside++;
	ncclResult_t r = real(comm, handle);
	inside--;
	return r;
}

TR_EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buf, size_t size, ncclWindow_t *win, int flags)
{
	NCCL_REAL(ncclCommWindowRegister, (ncclComm_t, void *, size_t, ncclWindow_t *, int));
	inside++;
	ncclResult_t r = real(comm, buf, size, win, flags);
	inside--;
	return r;
}

TR_EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win)
{
	NCCL_REAL(ncclCommWindowDeregister, (ncclComm_t, ncclWindow_t));
	inside++;
	ncclResult_t r = real(comm, win);
	inside--;
	return r;
}

int nccl_list(wire_nccl_comm **out, size_t *n)
{
	pthread_mutex_lock(&lock);
	wire_nccl_comm *v = calloc(ncomms ? ncomms : 1, sizeof(*v));
	for (uint32_t i = 0; v && i < ncomms; i++)
		v[i] = (wire_nccl_comm){ .id = comms[i].id,
					 .count = comms[i].count,
					 .rank = comms[i].rank,
					 .nranks = comms[i].nranks,
					 .flags = comms[i].flags };
	*n = ncomms;
	pthread_mutex_unlock(&lock);
	*out = v;
	return v ? 0 : -ENOMEM;
}
