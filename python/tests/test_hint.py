# SPDX-License-Identifier: LGPL-2.1-or-later
"""phos.hint(): -1 without phos, 0 under the tracer."""

import os
import subprocess
import sys
import textwrap

import pytest

import phos
from conftest import Job, alive, wait_for

PRINT_HINT = "import phos, sys; r = phos.hint(); print('hint', r); sys.exit(0 if r == 0 else 1)"


def _env(**more):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env.update(more)
    return env


def test_hint_without_phos():
    """hint() is a no-op that returns -1 in a process without phos"""
    assert phos.hint() == -1
    p = subprocess.run([sys.executable, "-c", PRINT_HINT], env=_env(), capture_output=True, text=True)
    assert p.stdout.strip() == "hint -1", p.stderr


def test_hint_under_ld_preload():
    """hint() returns 0 where libphos.so is preloaded"""
    lib = os.environ.get("PHOS_LIBPHOS")
    if not lib or not os.access(lib, os.R_OK):
        pytest.skip("libphos.so is not built (PHOS_LIBPHOS)")
    env = _env(LD_PRELOAD=lib, PHOS_SOCKET="/nonexistent",
               ASAN_OPTIONS="verify_asan_link_order=0:detect_leaks=0")
    p = subprocess.run([sys.executable, "-c", PRINT_HINT], env=env, capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip() == "hint 0", p.stdout + p.stderr


def test_hint_under_phos_run(rig):
    """hint() returns 0 in a Python program under phos run"""
    p = rig.phos_run([sys.executable, "-c", PRINT_HINT], detach=False)
    pid = int(p.stdout.strip().splitlines()[0])
    with open(rig.out(pid)) as f:
        out = f.read()
    assert p.returncode == 0 and "hint 0" in out, "exit %d, output %r, %s" % (p.returncode, out, p.stderr)


def test_inside_a_job_the_mount_is_not_there(rig):
    """inside a job of phos run, a call says the job does not see phosfs's mount, and what to do"""
    script = ("import phos\ntry:\n    phos.status()\nexcept phos.PhosError as e:\n    print('error:', e)\n")
    p = rig.phos_run([sys.executable, "-c", script], detach=False)
    pid = int(p.stdout.strip().splitlines()[0])
    with open(rig.out(pid)) as f:
        out = f.read()
    assert "error: phosfs is not mounted at %s as this process sees it: it runs in a job of phos run in a pid namespace" % rig.mnt \
        in out and "drive phos from outside the job" in out, out


# A Python program on the GPU (simcuda here) that calls phos.hint() after
# each step: it keeps 4 MiB of device memory, and each step adds one to
# its first word, reads it back and prints "step N".
GPU_STEPS = textwrap.dedent("""
    import ctypes, sys, time
    import phos
    cu = ctypes.CDLL("libcuda.so.1")
    def check(r, what):
        if r != 0:
            print("cuda failed:", what, r, flush=True)
            sys.exit(2)
    dev, ctx, mem = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    check(cu.cuInit(0), "cuInit")
    check(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    check(cu.cuMemAlloc_v2(ctypes.byref(mem), ctypes.c_size_t(4 << 20)), "cuMemAlloc")
    word = ctypes.c_uint64(0)
    check(cu.cuMemcpyHtoD_v2(mem, ctypes.byref(word), ctypes.c_size_t(8)), "cuMemcpyHtoD")
    step = 0
    while True:
        check(cu.cuMemcpyDtoH_v2(ctypes.byref(word), mem, ctypes.c_size_t(8)), "cuMemcpyDtoH")
        if word.value != step:
            print("device word", word.value, "!= step", step, flush=True)
            sys.exit(1)
        step += 1
        word.value = step
        check(cu.cuMemcpyHtoD_v2(mem, ctypes.byref(word), ctypes.c_size_t(8)), "cuMemcpyHtoD")
        print("step", step, "hint", phos.hint(), flush=True)
        time.sleep(0.02)
""")


def _steps(path):
    try:
        with open(path) as f:
            return [line for line in f.read().splitlines() if line.startswith("step ")]
    except OSError:
        return []


def test_hint_takes_a_checkpoint_between_steps(rig):
    """a traced Python program calling hint() between steps is checkpointed and restored, and steps on"""
    pid = rig.phos_run([sys.executable, "-c", GPU_STEPS])
    job = Job(rig, pid)
    try:
        status = os.path.join(rig.mnt, str(pid), "status")
        assert wait_for(lambda: len(_steps(job.out)) >= 5 and "traced: yes" in open(status).read(), 30), \
            "the program did not step under the tracer: %r" % _steps(job.out)[-3:]
        assert all(s.endswith(" hint 0") for s in _steps(job.out)), _steps(job.out)[-3:]
        ck = phos.checkpoint(pid, wait_timeout=120)
        n = len(_steps(job.out))
        assert wait_for(lambda: len(_steps(job.out)) > n + 3, 20), "it did not step on after the checkpoint"
        job.kill()
        back = phos.restore(ck["dir"], wait_timeout=120)
        job.adopt(back)
        n = len(_steps(job.out))
        assert wait_for(lambda: len(_steps(job.out)) > n + 3, 20), "the restored program did not step on"
        assert alive(back), "the restored program ended: %r" % _steps(job.out)[-3:]
    finally:
        job.end()
