# SPDX-License-Identifier: GPL-2.0-only
# phos: concurrent checkpoint and restore of NVIDIA GPU processes.
#
#   make              build everything
#   make check        run the TAP tests under prove
#   make SANITIZE=1   build (and check) with ASan and UBSan, in build-san/
#   make deps         install build dependencies and build CRIU (root)
#   make install      install under $(DESTDIR)$(PREFIX)
#   make gpu-bundle   self-contained folder for a GPU machine
#   make check-gpu    run the GPU suite from that folder (on the GPU machine;
#                     GPU_TESTS="NAME..." runs those alone)

PREFIX    ?= /usr/local
DESTDIR   ?=
# Where the libraries go (Debian's package: /usr/lib/<triplet>), libphos.so
# (Debian's: /usr/lib/<triplet>/phos), and the system's folders for units
# and tmpfiles.d (Debian bookworm: /lib/systemd/system).
LIBDIR    ?= $(PREFIX)/lib
TRACERDIR ?= $(LIBDIR)
UNITDIR   ?= $(PREFIX)/lib/systemd/system
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
PROVE     ?= prove
CC        ?= cc

ifeq ($(SANITIZE),1)
BUILD     ?= build-san
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
# Under ASan a checkpoint takes about 6 times as long: the 1000-checkpoint
# probe runs 200 there, the soak 50 (200 in the plain check), and the
# random-moment CoW checkpoints 40 (100).
SAN_TEST_ENV := PHOS_MANY_CHECKPOINTS=200 PHOS_SOAK_CHECKPOINTS=50 PHOS_COW_ITERATIONS=40
else
BUILD     ?= build
SAN_FLAGS :=
endif

LIBPHOSIMG := $(BUILD)/libphosimg.a
IMG_LIBS := -luring -llz4 -lxxhash -lpthread

CRIU_PREFIX := deps/criu
CRIU        := $(CRIU_PREFIX)/sbin/criu
BUNDLE      ?= gpu-bundle

CFLAGS   ?= -O2 -g
CPPFLAGS += -D_GNU_SOURCE -I$(CUDA_HOME)/include -Itests
XCFLAGS  := -std=c11 -Wall -Wextra -Werror $(SAN_FLAGS)
XLDFLAGS := $(SAN_FLAGS)
HAVE_NVCC := $(shell test -x $(NVCC) && echo 1)
# Hopper machine code, plus PTX for anything newer.
NVCC_ARCH := -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90

.PHONY: all check deps install gpu-bundle check-gpu bench clean demo
.DELETE_ON_ERROR:

all: simcuda image-format tracer phosfs criu-plugins examples tests bench

# ---- common/: code two or more components share --------------------------------

COMMON_SRC := $(wildcard common/*.c)
COMMON_OBJ := $(COMMON_SRC:common/%.c=$(BUILD)/common/%.o)
# The wire protocol, and the pid namespaces its peers may live in (read
# from /proc/PID/status).
WIRE_OBJ := $(BUILD)/common/wire.o $(BUILD)/common/pidns.o $(BUILD)/common/procstatus.o

$(BUILD)/common/%.o: common/%.c $(wildcard common/*.h)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -fPIC -fvisibility=hidden -c -o $@ $<

# ---- tracer/: libphos.so ----------------------------------------------------------

TRACER_SRC := $(wildcard tracer/*.c)
TRACER_OBJ := $(TRACER_SRC:tracer/%.c=$(BUILD)/tracer/%.o)
LIBPHOS := $(BUILD)/libphos.so

.PHONY: tracer
tracer: $(LIBPHOS)

$(BUILD)/tracer/%.o: tracer/%.c tracer/tracer.h $(wildcard common/*.h) include/phos.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -fPIC -fvisibility=hidden -c -o $@ $<

# No -lcuda: the real driver is found at run time, whichever it is.
$(LIBPHOS): $(TRACER_OBJ) $(BUILD)/common/cubin.o $(BUILD)/common/cuversions.o $(WIRE_OBJ)
	$(CC) $(XLDFLAGS) $(LDFLAGS) -shared -Wl,-soname,libphos.so -Wl,-z,defs -o $@ $^ -lpthread -ldl

# ---- phosfs/: the daemon; cli/: the phos command --------------------------------------

# The phos CLI talks to phosfs only through the mount and the socket, as
# any client would: cli/ and what it shares from common/.
PHOS_CLI_SRC := $(wildcard cli/*.c) common/duration.c common/procstatus.c
PHOSFS_SRC := $(wildcard phosfs/*.c)
PHOSFS_OBJ := $(PHOSFS_SRC:phosfs/%.c=$(BUILD)/phosfs/%.o)
ENGINE_SRC := $(wildcard engine/*.c)
ENGINE_OBJ := $(ENGINE_SRC:%.c=$(BUILD)/%.o)
JOB_SRC := $(wildcard job/*.c)
JOB_OBJ := $(JOB_SRC:%.c=$(BUILD)/%.o)
ENGINE_H := $(wildcard engine/*.h common/*.h) image-format/phosimg.h
JOB_H := $(wildcard job/*.h) $(ENGINE_H)
PHOSFS := $(BUILD)/phosfs/phosfs
PHOS_CLI := $(BUILD)/phos
# Recursive (=): read when a recipe runs, so that `make deps all` works on
# a machine where deps is what installs libfuse3-dev.
FUSE_CFLAGS = $(shell pkg-config --cflags fuse3 2>/dev/null)
FUSE_LIBS = $(shell pkg-config --libs fuse3 2>/dev/null)

.PHONY: phosfs
phosfs: $(PHOSFS) $(PHOS_CLI)

# The installed paths phosfs and phos have compiled in: rewritten (and they
# are rebuilt) when PREFIX or TRACERDIR is not that of the last build.
$(BUILD)/paths: FORCE
	@mkdir -p $(@D)
	@echo '$(PREFIX) $(TRACERDIR)' | cmp -s - $@ || echo '$(PREFIX) $(TRACERDIR)' >$@
.PHONY: FORCE

$(BUILD)/phosfs/%.o: phosfs/%.c $(wildcard phosfs/*.h) $(JOB_H) $(BUILD)/paths
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -DPHOS_LIBEXEC='"$(PREFIX)/libexec/phos"' $(FUSE_CFLAGS) $(XCFLAGS) $(CFLAGS) -c -o $@ $<

# job/ and engine/ run in phosfs's job processes.
$(BUILD)/engine/%.o: engine/%.c $(ENGINE_H)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -c -o $@ $<
$(BUILD)/job/%.o: job/%.c $(JOB_H)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -c -o $@ $<

# No -lcuda: the driver is loaded at the first job, so phosfs runs without one.
$(PHOSFS): $(PHOSFS_OBJ) $(JOB_OBJ) $(ENGINE_OBJ) $(WIRE_OBJ) $(BUILD)/common/duration.o $(LIBPHOSIMG)
	$(CC) $(XLDFLAGS) $(LDFLAGS) -o $@ $^ $(FUSE_LIBS) $(IMG_LIBS) -ljansson -lm -ldl -lpthread

$(PHOS_CLI): $(PHOS_CLI_SRC) $(wildcard cli/*.h) $(BUILD)/paths $(LIBPHOSIMG)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -DPHOS_LIBDIR='"$(TRACERDIR)"' $(XCFLAGS) $(CFLAGS) -o $@ $(PHOS_CLI_SRC) $(LIBPHOSIMG) $(XLDFLAGS) $(LDFLAGS) -ljansson $(IMG_LIBS)

# ---- criu-plugin/: runs inside CRIU -------------------------------------------
# Built against the criu-plugin.h of the CRIU that make deps builds, and
# never with sanitizers: CRIU, which loads it, has no sanitizer runtime.

CRIU_PLUGIN_DIR := $(BUILD)/criu-plugins
CRIU_PLUGIN := $(CRIU_PLUGIN_DIR)/phos_devices.so

.PHONY: criu-plugins
criu-plugins: $(CRIU_PLUGIN)

$(CRIU_PLUGIN): criu-plugin/devices.c
	@test -f $(CRIU_PREFIX)/include/criu-plugin.h || { echo "no $(CRIU_PREFIX)/include/criu-plugin.h: run 'make deps' first" >&2; exit 1; }
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -isystem $(CRIU_PREFIX)/include -std=c11 -Wall -Wextra -Werror $(CFLAGS) -fPIC -shared -o $@ $<

# ---- tests/simcuda: the software CUDA driver --------------------------------

SIMCUDA_SRC := $(wildcard tests/simcuda/*.c)
SIMCUDA_OBJ := $(SIMCUDA_SRC:tests/simcuda/%.c=$(BUILD)/simcuda/obj/%.o)
SIMCUDA_LIB := $(BUILD)/simcuda/libcuda.so.1

.PHONY: simcuda
simcuda: $(SIMCUDA_LIB) $(BUILD)/simcuda/libcuda.so

$(BUILD)/simcuda/obj/%.o: tests/simcuda/%.c $(wildcard tests/simcuda/*.h)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -fPIC -fvisibility=hidden -c -o $@ $<

$(BUILD)/simcuda/stubs.c: $(SIMCUDA_OBJ) mk/gen-simcuda-stubs.sh
	CC="$(CC)" mk/gen-simcuda-stubs.sh $(CUDA_HOME)/include/cuda.h $(SIMCUDA_OBJ) > $@

$(BUILD)/simcuda/stubs.o: $(BUILD)/simcuda/stubs.c
	$(CC) $(XCFLAGS) $(CFLAGS) -fPIC -fvisibility=hidden -c -o $@ $<

$(SIMCUDA_LIB): $(SIMCUDA_OBJ) $(BUILD)/simcuda/stubs.o $(BUILD)/common/cubin.o $(BUILD)/common/cuversions.o \
		$(BUILD)/common/pidns.o $(BUILD)/common/procstatus.o
	$(CC) $(XLDFLAGS) $(LDFLAGS) -shared -Wl,-soname,libcuda.so.1 -Wl,-z,defs -o $@ $^ -lpthread -ldl

$(BUILD)/simcuda/libcuda.so: $(SIMCUDA_LIB)
	ln -sf libcuda.so.1 $@

# ---- examples/ ------------------------------------------------------------------

# Linked against whichever libcuda.so.1 is found at run time: the GPU's, or
# simcuda's with LD_LIBRARY_PATH=$(BUILD)/simcuda.
.PHONY: examples
examples: $(BUILD)/examples/counter

$(BUILD)/examples/counter: examples/counter.c $(SIMCUDA_LIB)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -o $@ $< $(XLDFLAGS) $(LDFLAGS) -L$(BUILD)/simcuda -lcuda

# ---- image-format: libphosimg and phos-image -----------------------------------

IMG_SRC := $(filter-out image-format/phos-image.c,$(wildcard image-format/*.c))
IMG_OBJ := $(IMG_SRC:image-format/%.c=$(BUILD)/image-format/%.o)
PHOS_IMAGE := $(BUILD)/phos-image

.PHONY: image-format
image-format: $(LIBPHOSIMG) $(PHOS_IMAGE)

$(BUILD)/image-format/%.o: image-format/%.c $(wildcard image-format/*.h)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -Iimage-format -c -o $@ $<

$(LIBPHOSIMG): $(IMG_OBJ)
	rm -f $@
	$(AR) rcs $@ $^

$(PHOS_IMAGE): image-format/phos-image.c $(LIBPHOSIMG)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -Iimage-format -o $@ $< $(LIBPHOSIMG) $(XLDFLAGS) $(LDFLAGS) $(IMG_LIBS) -ljansson

# ---- benchmarks ----------------------------------------------------------------

# bench/fill too, though it runs only on the GPU machine: it links the engine.
bench: $(BUILD)/bench/image-bench $(BUILD)/bench/store-bw $(BUILD)/bench/read-path $(BUILD)/bench/fill \
	$(BUILD)/bench/shares-take $(BUILD)/bench/fork-snapshot $(BUILD)/bench/page-restore

# How fast saved pages come back into fresh memory, CRIU's restore's share
# that grows with the process (issue 29).
$(BUILD)/bench/page-restore: bench/page-restore.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -o $@ $< $(XLDFLAGS) $(LDFLAGS) -lpthread

# What a copy-on-write snapshot of host memory by fork costs (issue 29).
$(BUILD)/bench/fork-snapshot: bench/fork-snapshot.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -o $@ $< $(XLDFLAGS) $(LDFLAGS)

# The stall's search for the owners of imported memory (engine/shared.c).
$(BUILD)/bench/shares-take: bench/shares-take.c $(ENGINE_OBJ) $(WIRE_OBJ) $(LIBPHOSIMG)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -Iimage-format -o $@ $< $(ENGINE_OBJ) $(WIRE_OBJ) $(LIBPHOSIMG) \
		$(XLDFLAGS) $(LDFLAGS) $(IMG_LIBS) -ldl

$(BUILD)/bench/read-path: bench/read-path.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -o $@ $< $(XLDFLAGS) $(LDFLAGS) -lxxhash -lpthread

$(BUILD)/bench/store-bw: bench/store-bw.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -o $@ $< $(XLDFLAGS) $(LDFLAGS) -lpthread

$(BUILD)/bench/image-bench: bench/image-bench.c $(LIBPHOSIMG)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -Iimage-format -o $@ $< $(LIBPHOSIMG) $(XLDFLAGS) $(LDFLAGS) $(IMG_LIBS) -ljansson

# ---- kernels for the simcuda tests, built by nvcc -----------------------------

KERNEL_SRC := $(wildcard tests/kernels/*.cu)
ifeq ($(HAVE_NVCC),1)
KERNELS := $(foreach k,$(KERNEL_SRC:tests/kernels/%.cu=$(BUILD)/kernels/%),$(k).cubin $(k).fatbin $(k).ptx)
endif

$(BUILD)/kernels/%.cubin: tests/kernels/%.cu
	@mkdir -p $(@D)
	$(NVCC) -cubin -arch=sm_90 -o $@ $<
$(BUILD)/kernels/%.fatbin: tests/kernels/%.cu
	@mkdir -p $(@D)
	$(NVCC) -fatbin $(NVCC_ARCH) -o $@ $<
$(BUILD)/kernels/%.ptx: tests/kernels/%.cu
	@mkdir -p $(@D)
	$(NVCC) -ptx -arch=sm_90 -o $@ $<

# ---- TAP tests ----------------------------------------------------------------
# tests/NAME.c becomes $(BUILD)/tests/NAME, linked against simcuda;
# tests/NAME.sh is copied there. prove runs them all.

TEST_C   := $(wildcard tests/*.c)
TEST_SH  := $(wildcard tests/*.sh)
TEST_BIN := $(TEST_C:tests/%.c=$(BUILD)/tests/%) $(TEST_SH:tests/%.sh=$(BUILD)/tests/%)

# Programs the tests run under phos (tests/apps/), against simcuda or a GPU.
TEST_APPS := $(BUILD)/tests/apps/cow_app $(BUILD)/tests/apps/two_gpu_app $(BUILD)/tests/apps/tcp_app \
	     $(BUILD)/tests/apps/pair_app $(BUILD)/tests/apps/libnccl.so.2 $(BUILD)/tests/apps/host_writer \
	     $(BUILD)/tests/apps/ipc_app $(BUILD)/tests/apps/launch_app $(BUILD)/tests/apps/pool_app

.PHONY: tests
tests: $(TEST_BIN) $(KERNELS) $(TEST_APPS)
$(BUILD)/tests/apps/libnccl.so.2: tests/apps/nccl_stub.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -fPIC -shared -o $@ $<
$(BUILD)/tests/apps/%: tests/apps/%.c tests/apps/app.h tests/simcuda/simcuda.h $(SIMCUDA_LIB) $(BUILD)/simcuda/libcuda.so
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -o $@ $< $(XLDFLAGS) $(LDFLAGS) -rdynamic -L$(BUILD)/simcuda -lcuda -lpthread

# Without the sanitizers, even in SANITIZE builds (tests/apps/pair_app.c says why).
$(BUILD)/tests/apps/pair_app $(BUILD)/tests/apps/ipc_app: private XCFLAGS := -std=c11 -Wall -Wextra -Werror
$(BUILD)/tests/apps/pair_app $(BUILD)/tests/apps/ipc_app: private XLDFLAGS :=

# Without the sanitizers, even in SANITIZE builds (tests/apps/tcp_app.c says why).
$(BUILD)/tests/apps/tcp_app: tests/apps/tcp_app.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -std=c11 -Wall -Wextra -Werror $(CFLAGS) -o $@ $<

# Tests that call into engine/ directly link its objects.
ENGINE_TESTS := $(BUILD)/tests/phosfs_criu_errors_name_the_real_cause $(BUILD)/tests/restore_gives_clones_free_socket_names \
		$(BUILD)/tests/restore_ends_closed_connections_that_hold_its_ports $(BUILD)/tests/criu_stats_are_read_from_the_image \
		$(BUILD)/tests/shares_find_the_owner_of_every_import $(BUILD)/tests/criu_dump_writes_pages_at_once_where_criu_can \
		$(BUILD)/tests/tracer_nccl_cut_waits_for_an_open_group_to_end \
		$(BUILD)/tests/criu_dump_made_ready_ahead_seizes_the_tree_when_told $(BUILD)/tests/criu_gate_holds_the_tree_until_told \
		$(BUILD)/tests/criu_restore_reads_pages_with_threads_intact \
		$(BUILD)/tests/cgroups_of_a_process_resolve_to_files_it_can_join
$(ENGINE_TESTS): $(ENGINE_OBJ)
$(ENGINE_TESTS): TEST_OBJ = $(ENGINE_OBJ)
# The ctl grammar's fuzz test links the parser and what it calls.
CTL_TEST := $(BUILD)/tests/phosfs_ctl_grammar_fuzzed_accepts_only_what_it_should
$(CTL_TEST): $(BUILD)/phosfs/ctl.o $(BUILD)/common/duration.o $(BUILD)/job/devices.o $(ENGINE_OBJ)
$(CTL_TEST): TEST_OBJ = $(BUILD)/phosfs/ctl.o $(BUILD)/common/duration.o $(BUILD)/job/devices.o $(ENGINE_OBJ)
# The job request's own test links what makes and checks one.
REQUEST_TEST := $(BUILD)/tests/phosfs_job_refuses_a_malformed_request
$(REQUEST_TEST): $(BUILD)/job/request.o $(BUILD)/engine/progress.o $(BUILD)/engine/error.o
$(REQUEST_TEST): TEST_OBJ = $(BUILD)/job/request.o $(BUILD)/engine/progress.o $(BUILD)/engine/error.o

$(BUILD)/tests/%: tests/%.c $(wildcard tests/*.h) tests/simcuda/simcuda.h $(SIMCUDA_LIB) $(BUILD)/simcuda/libcuda.so $(LIBPHOSIMG) $(LIBPHOS) $(WIRE_OBJ) | $(PHOSFS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -Iimage-format -o $@ $< $(TEST_OBJ) $(LIBPHOSIMG) $(WIRE_OBJ) $(XLDFLAGS) $(LDFLAGS) \
		-rdynamic -L$(BUILD)/simcuda -lcuda -Wl,-rpath,'$$ORIGIN/../simcuda' $(IMG_LIBS) -ljansson -lm -ldl

$(BUILD)/tests/%: tests/%.sh
	@mkdir -p $(@D)
	install -m 0755 $< $@

# Tests find the project's CRIU and the kernels through these.
TEST_ENV := $(SAN_TEST_ENV) PHOS_CRIU=$(abspath $(CRIU)) PHOS_KERNELS=$(abspath $(BUILD)/kernels) PHOS_SRCDIR=$(CURDIR) PHOS_LIBPHOS=$(abspath $(LIBPHOS)) PHOS_PHOSFS=$(abspath $(PHOSFS)) PHOS_CLI=$(abspath $(PHOS_CLI)) PHOS_COUNTER=$(abspath $(BUILD)/examples/counter) PHOS_SIMCUDA=$(abspath $(BUILD)/simcuda) PHOS_CRIU_PLUGINS=$(abspath $(CRIU_PLUGIN_DIR)) PHOS_COW_APP=$(abspath $(BUILD)/tests/apps/cow_app) PHOS_TWO_GPU_APP=$(abspath $(BUILD)/tests/apps/two_gpu_app) PHOS_TCP_APP=$(abspath $(BUILD)/tests/apps/tcp_app) PHOS_PAIR_APP=$(abspath $(BUILD)/tests/apps/pair_app) PHOS_NCCL_STUB=$(abspath $(BUILD)/tests/apps/libnccl.so.2) PHOS_HOST_WRITER=$(abspath $(BUILD)/tests/apps/host_writer) PHOS_IPC_APP=$(abspath $(BUILD)/tests/apps/ipc_app) PHOS_LAUNCH_APP=$(abspath $(BUILD)/tests/apps/launch_app) PHOS_POOL_APP=$(abspath $(BUILD)/tests/apps/pool_app)

# Each test's output is kept in $(BUILD)/tests/logs; when one fails, its
# own words are printed again after prove's summary.
check: all
	@rm -rf $(BUILD)/tests/logs && mkdir -p $(BUILD)/tests/logs
	$(TEST_ENV) PHOS_TEST_LOGS=$(abspath $(BUILD)/tests/logs) $(PROVE) $(PROVE_FLAGS) --exec 'bash mk/test-log.sh' $(TEST_BIN) \
		|| { bash mk/test-failures.sh $(BUILD)/tests/logs; exit 1; }

# Mounts phosfs on a temporary directory, runs examples/counter (on the GPU
# if there is one, else on simcuda), checkpoints, kills and restores it.
demo: all
	$(TEST_ENV) bash examples/demo.sh

# ---- dependencies, install ----------------------------------------------------

deps:
	bash mk/deps.sh $(CRIU_PREFIX)

# The examples name PREFIX's paths; phosimg.pc those of this install.
PHOS_VERSION := $(shell sed -n 's/^\#define PHOS_VERSION "\(.*\)"/\1/p' phosfs/phosfs.h)
INSTALL_SED := sed -e 's|/usr/local/|$(PREFIX)/|g' -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
	-e 's|@VERSION@|$(PHOS_VERSION)|g'

install: image-format tracer phosfs criu-plugins
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(PREFIX)/include/phos \
		$(DESTDIR)$(PREFIX)/libexec/phos $(DESTDIR)$(PREFIX)/share/doc/phos \
		$(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man3 $(DESTDIR)$(PREFIX)/share/man/man5 \
		$(DESTDIR)$(PREFIX)/share/man/man7 $(DESTDIR)$(PREFIX)/share/man/man8 $(DESTDIR)$(PREFIX)/sbin \
		$(DESTDIR)$(TRACERDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(TMPFILESDIR)
	install -m 0755 $(PHOS_IMAGE) $(DESTDIR)$(PREFIX)/bin/phos-image
	install -m 0644 $(LIBPHOSIMG) $(DESTDIR)$(LIBDIR)/libphosimg.a
	$(INSTALL_SED) image-format/libphosimg.pc.in >$(DESTDIR)$(LIBDIR)/pkgconfig/phosimg.pc
	install -m 0644 image-format/phosimg.h $(DESTDIR)$(PREFIX)/include/phos/phosimg.h
	install -m 0755 $(LIBPHOS) $(DESTDIR)$(TRACERDIR)/libphos.so
	install -m 0644 include/phos.h $(DESTDIR)$(PREFIX)/include/phos.h
	install -m 0644 man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 man/*.3 $(DESTDIR)$(PREFIX)/share/man/man3/
	install -m 0644 man/*.5 $(DESTDIR)$(PREFIX)/share/man/man5/
	install -m 0644 man/*.7 $(DESTDIR)$(PREFIX)/share/man/man7/
	install -m 0644 man/*.8 $(DESTDIR)$(PREFIX)/share/man/man8/
	install -m 0755 $(PHOSFS) $(DESTDIR)$(PREFIX)/sbin/phosfs
	install -m 0755 $(PHOS_CLI) $(DESTDIR)$(PREFIX)/bin/phos
	install -d $(DESTDIR)$(PREFIX)/share/phos
	install -m 0755 examples/cron/phos-checkpoint-all examples/rsync-backup.sh $(DESTDIR)$(PREFIX)/share/phos/
	install -m 0755 examples/slurm/train.sbatch $(DESTDIR)$(PREFIX)/share/phos/
	install -m 0644 examples/kubernetes/pod.yaml $(DESTDIR)$(PREFIX)/share/phos/
	$(INSTALL_SED) examples/cron/phos.cron >$(DESTDIR)$(PREFIX)/share/phos/phos.cron
	$(INSTALL_SED) examples/systemd/phosfs.service >$(DESTDIR)$(UNITDIR)/phosfs.service
	install -m 0644 examples/systemd/tmpfiles.d/phos.conf $(DESTDIR)$(TMPFILESDIR)/phos.conf
	test ! -x $(CRIU) || install -m 0755 $(CRIU) $(DESTDIR)$(PREFIX)/libexec/phos/criu
	install -d $(DESTDIR)$(PREFIX)/libexec/phos/criu-plugins
	install -m 0644 $(CRIU_PLUGIN) $(DESTDIR)$(PREFIX)/libexec/phos/criu-plugins/
	install -m 0644 README.md doc/ARCHITECTURE.md image-format/FORMAT.md $(DESTDIR)$(PREFIX)/share/doc/phos/

# ---- GPU machine --------------------------------------------------------------
# The bundle carries everything the GPU machine lacks: CRIU and the shared
# libraries it needs beyond glibc, the GPU tests, and the programs they run,
# built here. check-gpu builds nothing.

GPU_CU  := $(wildcard tests/gpu/*.cu)
# rig.sh and matrix.sh are no tests: the tests source them (share/gpu-rig.sh
# and share/gpu-matrix.sh in the bundle).
# With them: CRIU's check, and two phos run tests that also run on
# simcuda (a hung dump cancelled, restores into the asker's cgroups), here
# on the real driver.
GPU_SH  := $(filter-out tests/gpu/rig.sh tests/gpu/matrix.sh,$(wildcard tests/gpu/*.sh)) tests/criu_check_looks_good.sh \
	   tests/phos_run_on_signal_timeout_cancels_a_hung_checkpoint.sh tests/phos_run_restored_job_joins_the_callers_cgroups.sh
GPU_BIN := $(GPU_CU:tests/gpu/%.cu=$(BUNDLE)/progs/%)

GPU_C   := $(wildcard tests/gpu/*.c)
GPU_BIN += $(GPU_C:tests/gpu/%.c=$(BUNDLE)/progs/%)
GPU_KERNELS := $(patsubst tests/gpu/kernels/%.cu,$(BUNDLE)/progs/%.cubin,$(wildcard tests/gpu/kernels/*.cu))

$(BUNDLE)/progs/%: tests/gpu/%.cu tests/tap.h
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_ARCH) -Itests -cudart static -o $@ $< $(if $(findstring cublas,$*),-lcublas)

# The same runtime program against the shared cudart.
GPU_BIN += $(BUNDLE)/progs/cuda_runtime_program_runs_shared
$(BUNDLE)/progs/cuda_runtime_program_runs_shared: tests/gpu/cuda_runtime_program_runs.cu tests/tap.h
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_ARCH) -Itests -cudart shared -o $@ $<

# Driver-API programs for the GPU machine: linked against the driver's
# stub here, they use the real driver there.
$(BUNDLE)/progs/%: tests/gpu/%.c $(wildcard tests/*.h tests/gpu/*.h) $(WIRE_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -o $@ $< $(WIRE_OBJ) -L$(CUDA_HOME)/lib64/stubs -lcuda -lpthread

$(BUNDLE)/progs/%.cubin: tests/gpu/kernels/%.cu
	@mkdir -p $(@D)
	$(NVCC) -cubin -arch=sm_90 -o $@ $<

GPU_BENCH := $(BUNDLE)/bench/launch-rate $(BUNDLE)/bench/launch.cubin $(BUNDLE)/bench/step-app $(BUNDLE)/bench/step.cubin \
	     $(BUNDLE)/bench/h2d-ring $(BUNDLE)/bench/h2d-mapped

# The restore's fill alone (the driver is loaded at run time; the bundle
# carries it as bin/fill, with its libraries).
$(BUILD)/bench/fill: bench/fill.c $(ENGINE_OBJ) $(WIRE_OBJ) $(LIBPHOSIMG)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -Iimage-format -o $@ $< $(ENGINE_OBJ) $(WIRE_OBJ) $(LIBPHOSIMG) \
		$(XLDFLAGS) $(LDFLAGS) $(IMG_LIBS) -ldl

$(BUNDLE)/bench/step-app: bench/step-app.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -o $@ $< -L$(CUDA_HOME)/lib64/stubs -lcuda

$(BUNDLE)/bench/h2d-ring: bench/h2d-ring.c bench/cuda-bench.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -o $@ $< -L$(CUDA_HOME)/lib64/stubs -lcuda -lxxhash -lpthread

$(BUNDLE)/bench/h2d-mapped: bench/h2d-mapped.c bench/cuda-bench.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -o $@ $< -L$(CUDA_HOME)/lib64/stubs -lcuda -lxxhash -lpthread

$(BUNDLE)/bench/step.cubin: bench/kernels/step.cu
	@mkdir -p $(@D)
	$(NVCC) -cubin -arch=sm_90 -o $@ $<

$(BUNDLE)/bench/launch-rate: bench/launch-rate.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -o $@ $< -L$(CUDA_HOME)/lib64/stubs -lcuda

$(BUNDLE)/bench/launch.cubin: bench/kernels/launch.cu
	@mkdir -p $(@D)
	$(NVCC) -cubin -arch=sm_90 -o $@ $<

# The CoW harness and its kernels, against the real driver.
GPU_BIN += $(BUNDLE)/apps/cow_app $(BUNDLE)/apps/cow.cubin
$(BUNDLE)/apps/cow_app: tests/apps/cow_app.c tests/simcuda/simcuda.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -o $@ $< -L$(CUDA_HOME)/lib64/stubs -lcuda
GPU_BIN += $(BUNDLE)/apps/host_writer
$(BUNDLE)/apps/host_writer: tests/apps/host_writer.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -o $@ $< -L$(CUDA_HOME)/lib64/stubs -lcuda -lpthread
GPU_BIN += $(BUNDLE)/apps/pool_app
$(BUNDLE)/apps/pool_app: tests/apps/pool_app.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -o $@ $< -L$(CUDA_HOME)/lib64/stubs -lcuda -lpthread
GPU_BIN += $(BUNDLE)/apps/two_gpu_app
$(BUNDLE)/apps/two_gpu_app: tests/apps/two_gpu_app.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -o $@ $< -L$(CUDA_HOME)/lib64/stubs -lcuda
$(BUNDLE)/apps/cow.cubin: tests/kernels/cow.cu
	@mkdir -p $(@D)
	$(NVCC) -cubin -arch=sm_90 -o $@ $<
GPU_BIN += $(BUNDLE)/apps/pair_app $(BUNDLE)/apps/pair.cubin
$(BUNDLE)/apps/pair_app: tests/apps/pair_app.c tests/simcuda/simcuda.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -o $@ $< -L$(CUDA_HOME)/lib64/stubs -lcuda
$(BUNDLE)/apps/pair.cubin: tests/kernels/pair.cu
	@mkdir -p $(@D)
	$(NVCC) -cubin -arch=sm_90 -o $@ $<

# The demo program, against the real driver.
$(BUNDLE)/examples/counter: examples/counter.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(XCFLAGS) $(CFLAGS) -o $@ $< -L$(CUDA_HOME)/lib64/stubs -lcuda

gpu-bundle: $(GPU_BIN) $(GPU_KERNELS) $(GPU_BENCH) $(PHOS_IMAGE) $(BUILD)/bench/image-bench $(BUILD)/bench/store-bw $(BUILD)/bench/fork-snapshot \
	    $(BUILD)/bench/page-restore $(BUILD)/bench/fill $(BUILD)/bench/read-path $(LIBPHOS) \
	    $(PHOSFS) $(PHOS_CLI) $(BUNDLE)/examples/counter $(CRIU_PLUGIN)
	@test -x $(CRIU) || { echo "no CRIU in $(CRIU_PREFIX): run 'make deps' first" >&2; exit 1; }
	@test "$(HAVE_NVCC)" = 1 || { echo "no nvcc under $(CUDA_HOME): the GPU programs need it" >&2; exit 1; }
	mk/gpu-bundle.sh $(BUNDLE) bin:$(CRIU) bin:$(PHOS_IMAGE) bin:$(BUILD)/bench/image-bench bin:$(BUILD)/bench/store-bw bin:$(BUILD)/bench/fork-snapshot \
		bin:$(BUILD)/bench/page-restore bin:$(BUILD)/bench/fill bin:$(BUILD)/bench/read-path lib:$(LIBPHOS) \
		bin:$(PHOSFS) bin:$(PHOS_CLI) \
		$(addprefix test:,$(GPU_SH)) share:tests/gpu/rig.sh:gpu-rig.sh share:tests/gpu/matrix.sh:gpu-matrix.sh \
		share:tests/procs.bash:procs.bash share:tests/nodes.bash:nodes.bash
	install -d $(BUNDLE)/criu-plugins
	install -m 0644 $(CRIU_PLUGIN) $(BUNDLE)/criu-plugins/
	@du -sh $(BUNDLE)

check-gpu:
	@test -x $(BUNDLE)/run-checks || { echo "no $(BUNDLE)/: run 'make gpu-bundle' on the build machine and copy it here" >&2; exit 1; }
	PHOS_GPU_TESTS="$(GPU_TESTS)" $(BUNDLE)/run-checks $(PROVE_FLAGS)

clean:
	rm -rf build build-san $(BUNDLE)
