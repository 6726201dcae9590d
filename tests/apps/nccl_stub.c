/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * libnccl.so.2 for the tests: NCCL's API in name and ABI, with nothing
 * behind it. Communicators are created from a unique id, split and
 * destroyed; collectives and point-to-point calls check their arguments
 * and do nothing. ncclBcast calls ncclBroadcast through its exported name,
 * as NCCL does. For what phos does with a process that has NCCL loaded
 * (tests/apps/pair_app loads it when asked) and for the tracer's NCCL
 * interposer (tests/tracer_app.h, command 'n').
 */
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))

typedef struct ncclComm {
	int rank, nranks;
} *ncclComm_t;
typedef struct {
	char internal[128];
} ncclUniqueId;
typedef int ncclResult_t;
typedef void *cudaStream_t;

enum { ncclSuccess = 0, ncclInvalidArgument = 4 };

API ncclResult_t ncclGetVersion(int *version);
API ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
API ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, void *config);
API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *out, void *config);
API ncclResult_t ncclCommDestroy(ncclComm_t comm);
API ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);
API ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int t, int op, ncclComm_t c, cudaStream_t st);
API ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, int t, int root, ncclComm_t c, cudaStream_t st);
API ncclResult_t ncclBcast(void *b, size_t n, int t, int root, ncclComm_t c, cudaStream_t st);
API ncclResult_t ncclSend(const void *s, size_t n, int t, int peer, ncclComm_t c, cudaStream_t st);
API ncclResult_t ncclRecv(void *r, size_t n, int t, int peer, ncclComm_t c, cudaStream_t st);
API ncclResult_t ncclGroupStart(void);
API ncclResult_t ncclGroupEnd(void);

ncclResult_t ncclGetVersion(int *version)
{
	*version = 22700;
	return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	static unsigned char next = 1;
	memset(id->internal, next++, sizeof(id->internal));
	return ncclSuccess;
}

static ncclResult_t make(ncclComm_t *comm, int nranks, int rank)
{
	if (!comm || nranks < 1 || rank < 0 || rank >= nranks)
		return ncclInvalidArgument;
	*comm = malloc(sizeof(**comm));
	if (!*comm)
		return 2;
	(*comm)->rank = rank;
	(*comm)->nranks = nranks;
	return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	(void)id;
	return make(comm, nranks, rank);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, void *config)
{
	(void)config;
	return ncclCommInitRank(comm, nranks, id, rank);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *out, void *config)
{
	(void)key;
	(void)config;
	if (!comm || !out)
		return ncclInvalidArgument;
	if (color < 0) {
		*out = NULL;
		return ncclSuccess;
	}
	return make(out, 1, 0);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	free(comm);
	return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
	*count = comm->nranks;
	return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
	*rank = comm->rank;
	return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int t, int op, ncclComm_t c, cudaStream_t st)
{
	(void)s, (void)r, (void)n, (void)t, (void)op, (void)st;
	return c ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, int t, int root, ncclComm_t c, cudaStream_t st)
{
	(void)s, (void)r, (void)n, (void)t, (void)st;
	return c && root >= 0 && root < c->nranks ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t ncclBcast(void *b, size_t n, int t, int root, ncclComm_t c, cudaStream_t st)
{
	return ncclBroadcast(b, b, n, t, root, c, st);
}

ncclResult_t ncclSend(const void *s, size_t n, int t, int peer, ncclComm_t c, cudaStream_t st)
{
	(void)s, (void)n, (void)t, (void)peer, (void)st;
	return c ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t ncclRecv(void *r, size_t n, int t, int peer, ncclComm_t c, cudaStream_t st)
{
	(void)r, (void)n, (void)t, (void)peer, (void)st;
	return c ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t ncclGroupStart(void)
{
	return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
	return ncclSuccess;
}
