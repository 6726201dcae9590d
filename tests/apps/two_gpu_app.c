/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * two_gpu_app: one process using two GPUs, for checking that a checkpoint
 * brings each GPU's memory back to its own GPU.
 *
 *   two_gpu_app [MIB] [SEED] [nopeer]
 *
 * It allocates a buffer on GPU 0 and one on GPU 1 (MIB MiB each; default
 * 8), each in its device's primary context, and keeps a host copy of each.
 * Then, one operation after another, for ever: a memset of a range of
 * one buffer, a copy from the host into one, a peer copy of a range of
 * one GPU's buffer into the other's (cuMemcpyPeerAsync, both ways), or a
 * plain cuMemcpyDtoDAsync between them, run by either GPU. Where the GPUs
 * can reach each other it enables peer access both ways at the start
 * (cuCtxEnablePeerAccess, as PyTorch does before copying between GPUs),
 * so that the plain copies go directly; with "nopeer", or without, the
 * driver makes them peer copies. After each operation it applies the same
 * one to its host copies.
 *
 * It prints "gpus U0 U1" (the UUIDs behind its ordinals 0 and 1) and
 * "peer access on" (or off) at the start, and "ops N" every 200 operations. On SIGUSR1 it waits for both
 * devices, compares each buffer byte for byte with its host copy, and
 * prints "verify ok ops N gpus U0 U1" (the UUIDs now, which a restore onto
 * other GPUs changes) or "verify FAILED …". It needs two GPUs, and exits
 * with 2 and says so when there is one.
 */
#include <cuda.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define APP_NAME "two_gpu_app"
#define APP_FAILED 1
#include "app.h"

static void uuid_of(int ordinal, char *out)
{
	CUdevice d;
	CUuuid u;
	check(cuDeviceGet(&d, ordinal), "cuDeviceGet");
	check(cuDeviceGetUuid(&u, d), "cuDeviceGetUuid");
	char *p = out + sprintf(out, "GPU-");
	for (int i = 0; i < 16; i++)
		p += sprintf(p, "%02x%s", (unsigned char)u.bytes[i], i == 3 || i == 5 || i == 7 || i == 9 ? "-" : "");
}

static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

int main(int argc, char **argv)
{
	size_t bytes = (size_t)(argc > 1 ? strtoull(argv[1], NULL, 10) : 8) << 20;
	uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
	seed = seed ? seed : 1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	check(cuInit(0), "cuInit");
	int n = 0;
	check(cuDeviceGetCount(&n), "cuDeviceGetCount");
	if (n < 2) {
		printf("two_gpu_app: needs two GPUs, and this machine has %d\n", n);
		return 2;
	}
	CUcontext ctx[2];
	CUdeviceptr buf[2];
	CUstream st[2];
	uint8_t *host[2], *tmp = malloc(bytes);
	for (int d = 0; d < 2; d++) {
		CUdevice dev;
		check(cuDeviceGet(&dev, d), "cuDeviceGet");
		check(cuDevicePrimaryCtxRetain(&ctx[d], dev), "cuDevicePrimaryCtxRetain");
		check(cuCtxSetCurrent(ctx[d]), "cuCtxSetCurrent");
		check(cuMemAlloc(&buf[d], bytes), "cuMemAlloc");
		check(cuStreamCreate(&st[d], CU_STREAM_NON_BLOCKING), "cuStreamCreate");
		check(cuMemsetD8(buf[d], (unsigned char)(d + 1), bytes), "cuMemsetD8");
		host[d] = malloc(bytes);
		if (!host[d] || !tmp) {
			printf("two_gpu_app: out of host memory\n");
			return 1;
		}
		memset(host[d], d + 1, bytes);
	}
	char u0[48], u1[48];
	uuid_of(0, u0);
	uuid_of(1, u1);
	printf("gpus %s %s\n", u0, u1);
	int can01 = 0, can10 = 0;
	check(cuDeviceCanAccessPeer(&can01, 0, 1), "cuDeviceCanAccessPeer");
	check(cuDeviceCanAccessPeer(&can10, 1, 0), "cuDeviceCanAccessPeer");
	int peer = can01 && can10 && !(argc > 3 && !strcmp(argv[3], "nopeer"));
	for (int d = 0; d < 2 && peer; d++) {
		check(cuCtxSetCurrent(ctx[d]), "cuCtxSetCurrent");
		check(cuCtxEnablePeerAccess(ctx[1 - d], 0), "cuCtxEnablePeerAccess");
	}
	printf("peer access %s\n", peer ? "on" : "off");
	signal(SIGUSR1, on_usr1);
	for (uint64_t op = 1;; op++) {
		int d = (int)(next(&seed) % 2), kind = (int)(next(&seed) % 4);
		int by = d; /* the GPU whose stream runs it */
		size_t at = next(&seed) % bytes, len = 1 + next(&seed) % (bytes / 4);
		if (at + len > bytes)
			len = bytes - at;
		check(cuCtxSetCurrent(ctx[d]), "cuCtxSetCurrent");
		if (kind == 0) {
			unsigned char v = (unsigned char)next(&seed);
			check(cuMemsetD8Async(buf[d] + at, v, len, st[d]), "cuMemsetD8Async");
			memset(host[d] + at, v, len);
		} else if (kind == 1) {
			/* Its own bytes, so the source may be reused at once. */
			for (size_t i = 0; i < len; i++)
				host[d][at + i] = (uint8_t)(op * 31 + i);
			check(cuMemcpyHtoD(buf[d] + at, host[d] + at, len), "cuMemcpyHtoD");
		} else if (kind == 2) {
			/* From the other GPU's buffer, at another offset. */
			size_t from = next(&seed) % (bytes - len + 1);
			check(cuStreamSynchronize(st[1 - d]), "cuStreamSynchronize");
			check(cuMemcpyPeerAsync(buf[d] + at, ctx[d], buf[1 - d] + from, ctx[1 - d], len, st[d]),
			      "cuMemcpyPeerAsync");
			memcpy(host[d] + at, host[1 - d] + from, len);
		} else {
			/* The same, as a plain copy that one of the two GPUs
			 * runs: it reads or writes the other's memory (through
			 * peer access, or as the driver's peer copy). */
			size_t from = next(&seed) % (bytes - len + 1);
			by = (int)(next(&seed) % 2) ? d : 1 - d;
			check(cuStreamSynchronize(st[1 - d]), "cuStreamSynchronize");
			check(cuCtxSetCurrent(ctx[by]), "cuCtxSetCurrent");
			check(cuMemcpyDtoDAsync(buf[d] + at, buf[1 - d] + from, len, st[by]), "cuMemcpyDtoDAsync");
			memcpy(host[d] + at, host[1 - d] + from, len);
		}
		/* The next operation may read this one's bytes on the other
		 * GPU: keep the two streams in order. */
		check(cuStreamSynchronize(st[by]), "cuStreamSynchronize");
		if (op % 200 == 0)
			printf("ops %llu\n", (unsigned long long)op);
		if (verify_asked) {
			verify_asked = 0;
			int bad = 0;
			for (int k = 0; k < 2 && !bad; k++) {
				check(cuCtxSetCurrent(ctx[k]), "cuCtxSetCurrent");
				check(cuMemcpyDtoH(tmp, buf[k], bytes), "cuMemcpyDtoH");
				for (size_t i = 0; i < bytes && !bad; i++)
					if (tmp[i] != host[k][i]) {
						printf("verify FAILED: GPU %d byte %zu is 0x%02x, not 0x%02x (ops %llu)\n", k, i,
						       tmp[i], host[k][i], (unsigned long long)op);
						bad = 1;
					}
			}
			uuid_of(0, u0);
			uuid_of(1, u1);
			if (!bad)
				printf("verify ok ops %llu gpus %s %s\n", (unsigned long long)op, u0, u1);
		}
	}
}
