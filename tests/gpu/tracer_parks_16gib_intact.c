/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * On a GPU: a process holding 16 GiB of device memory, run under the
 * tracer, parks (its memory handed to this test as fds, then released) and
 * unparks with every byte intact; the driver's lock+checkpoint of the
 * parked process is timed, and so is that of an untraced process of the
 * same size, for comparison. The process also maps a VMM allocation of its
 * own, which parks too and is released by its original handle afterwards.
 */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "../peer.h"
#include "../tap.h"

#define NBUF 8
#define BUF_BYTES (2ull << 30)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *bundle_file(const char *rel)
{
	static char path[PATH_MAX];
	const char *b = getenv("PHOS_BUNDLE");
	snprintf(path, sizeof(path), "%s/%s", b ? b : "gpu-bundle", rel);
	return path;
}

/* ---- the application ------------------------------------------------------ */

static CUfunction fill_fn, check_fn;
static CUdeviceptr bufs[NBUF + 1]; /* the last: its own VMM allocation */
static CUmemGenericAllocationHandle own_h;
#define OWN_BYTES (64ull << 20)

static int make_own(void)
{
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 } };
	CUmemAccessDesc acc = { .location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	size_t g = 0;
	cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	return cuMemCreate(&own_h, OWN_BYTES, &prop, 0) || cuMemAddressReserve(&bufs[NBUF], OWN_BYTES, g, 0, 0) ||
	       cuMemMap(bufs[NBUF], OWN_BYTES, 0, own_h, 0) || cuMemSetAccess(bufs[NBUF], OWN_BYTES, &acc, 1);
}

static int drop_own(void)
{
	return cuMemUnmap(bufs[NBUF], OWN_BYTES) || cuMemRelease(own_h) || cuMemAddressFree(bufs[NBUF], OWN_BYTES);
}

static int launch_all(int check, unsigned long long *bad)
{
	CUdeviceptr dbad;
	if (check && (cuMemAlloc(&dbad, 8) || cuMemsetD8(dbad, 0, 8)))
		return -1;
	for (int b = 0; b <= NBUF; b++) {
		unsigned long long n = (b < NBUF ? BUF_BYTES : OWN_BYTES) / 4;
		unsigned seed = 1234u + (unsigned)b;
		void *fa[] = { &bufs[b], &n, &seed };
		void *ca[] = { &bufs[b], &n, &seed, &dbad };
		if (cuLaunchKernel(check ? check_fn : fill_fn, 1056, 1, 1, 512, 1, 1, 0, NULL, check ? ca : fa, NULL))
			return -1;
	}
	if (cuCtxSynchronize())
		return -1;
	if (check) {
		if (cuMemcpyDtoH(bad, dbad, 8))
			return -1;
		cuMemFree(dbad);
	}
	return 0;
}

static int app(int fd)
{
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	char r = 'n';
	if (!cuInit(0) && !cuDeviceGet(&dev, 0) && !cuDevicePrimaryCtxRetain(&ctx, dev) && !cuCtxSetCurrent(ctx) &&
	    !cuModuleLoad(&mod, bundle_file("progs/pattern.cubin")) && !cuModuleGetFunction(&fill_fn, mod, "fill") &&
	    !cuModuleGetFunction(&check_fn, mod, "check")) {
		r = 'y';
		for (int b = 0; b < NBUF && r == 'y'; b++)
			r = cuMemAlloc(&bufs[b], BUF_BYTES) ? 'n' : 'y';
		if (r == 'y')
			r = make_own() ? 'n' : 'y';
		if (r == 'y')
			r = launch_all(0, NULL) ? 'n' : 'y';
	}
	if (write(fd, &r, 1) != 1 || r != 'y')
		return 1;
	char c;
	while (read(fd, &c, 1) == 1 && c != 'q') {
		if (c == 'r') {
			r = drop_own() ? 'n' : 'y';
			if (write(fd, &r, 1) != 1)
				return 1;
			continue;
		}
		unsigned long long bad = 1;
		r = launch_all(1, &bad) == 0 && bad == 0 ? 'y' : 'n';
		if (r != 'y')
			fprintf(stderr, "# %llu words differ\n", bad);
		if (write(fd, &r, 1) != 1)
			return 1;
	}
	return 0;
}

/* ---- the test ------------------------------------------------------------- */

static pid_t start(const char *argv0, const char *sock, int traced, int *fd)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[0]);
		char a[16];
		snprintf(a, sizeof(a), "%d", sv[1]);
		if (traced)
			setenv("LD_PRELOAD", bundle_file("lib/libphos.so"), 1);
		setenv("PHOS_SOCKET", sock, 1);
		execl("/proc/self/exe", argv0, "app", a, (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	*fd = sv[0];
	char r = 0;
	if (read(*fd, &r, 1) != 1 || r != 'y')
		return -1;
	return pid;
}

static char ask(int fd, char c)
{
	char r = 0;
	return write(fd, &c, 1) == 1 && read(fd, &r, 1) == 1 ? r : 0;
}

static void stop(pid_t pid, int fd)
{
	ask(fd, 'q');
	close(fd);
	waitpid(pid, NULL, 0);
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "app"))
		return app(atoi(argv[2]));
	int count = 0;
	if (cuInit(0) || cuDeviceGetCount(&count) || count == 0)
		skip_all("no CUDA device");
	plan(7);
	char sock[108];
	snprintf(sock, sizeof(sock), "/tmp/phos-gpu-peer-%d.sock", (int)getpid());
	peer p;
	if (peer_listen(&p, sock))
		bail("cannot listen on %s", sock);
	int fd;
	pid_t pid = start(argv[0], sock, 1, &fd);
	if (pid < 0)
		bail("the traced program did not start");
	struct pollfd pf = { p.lfd, POLLIN, 0 };
	ok(poll(&pf, 1, 10000) == 1 && peer_accept(&p) == 0 && p.hello.pid == pid,
	   "a process holding 16 GiB registers under the tracer");

	char err[160] = "";
	double t0 = now();
	int e = peer_park(&p, err, sizeof(err));
	double t_park = now() - t0;
	uint64_t parked = 0;
	for (int i = 0; i < p.nobjs; i++)
		parked += p.objs[i].size;
	ok(e == 0 && parked >= NBUF * BUF_BYTES + OWN_BYTES, "park hands over %llu bytes in %d objects in %.3f s (%s)",
	   (unsigned long long)parked, p.nobjs, t_park, err);

	t0 = now();
	CUresult r = cuCheckpointProcessLock(pid, NULL);
	r = r ? r : cuCheckpointProcessCheckpoint(pid, NULL);
	double t_ckpt = now() - t0;
	t0 = now();
	CUresult r2 = cuCheckpointProcessRestore(pid, NULL);
	r2 = r2 ? r2 : cuCheckpointProcessUnlock(pid, NULL);
	double t_restore = now() - t0;
	ok(r == CUDA_SUCCESS && t_ckpt < 0.5, "the driver's lock+checkpoint of the parked process takes %.3f s", t_ckpt);
	diag("driver restore+unlock of the parked process: %.3f s", t_restore);
	t0 = now();
	e = r2 == CUDA_SUCCESS ? peer_unpark(&p) : -EIO;
	ok(e == 0, "unpark maps the memory back in %.3f s", now() - t0);
	ok(ask(fd, 'v') == 'y', "all 16 GiB, and its own 64 MiB VMM allocation, hold the same bytes as before");
	ok(ask(fd, 'r') == 'y', "it unmaps and releases its own allocation by its original handle");
	stop(pid, fd);

	/* The same program, untraced: the driver copies its memory. */
	pid = start(argv[0], sock, 0, &fd);
	t0 = now();
	r = pid > 0 ? cuCheckpointProcessLock(pid, NULL) : CUDA_ERROR_UNKNOWN;
	r = r ? r : cuCheckpointProcessCheckpoint(pid, NULL);
	double t_base = now() - t0;
	t0 = now();
	if (!r)
		r = cuCheckpointProcessRestore(pid, NULL) || cuCheckpointProcessUnlock(pid, NULL);
	double t_base_restore = now() - t0;
	ok(r == CUDA_SUCCESS && ask(fd, 'v') == 'y',
	   "for comparison, untraced: lock+checkpoint %.3f s, restore+unlock %.3f s", t_base, t_base_restore);
	if (pid > 0)
		stop(pid, fd);
	close(p.lfd);
	unlink(sock);
	return done();
}
