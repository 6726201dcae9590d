/*
 * A library named libnccl.so.2 that does nothing but say its version: for
 * tests of what phos does with a process that has NCCL loaded
 * (tests/apps/pair_app loads it when asked).
 */
int ncclGetVersion(int *version);

__attribute__((visibility("default"))) int ncclGetVersion(int *version)
{
	*version = 22700;
	return 0;
}
