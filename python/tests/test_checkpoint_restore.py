# SPDX-License-Identifier: LGPL-2.1-or-later
"""phos.checkpoint() and phos.restore() against a real phosfs, on simcuda."""

import os
import signal
import subprocess

import pytest

import phos
from conftest import alive, wait_for


def _verified(rig, path):
    """Whether phos-image verify passes the image at path (True where
    phos-image is not built: the image's files are then checked)."""
    if not os.access(rig.image_tool, os.X_OK):
        return os.path.exists(os.path.join(path, "manifest"))
    return subprocess.run([rig.image_tool, "verify", path], capture_output=True).returncode == 0


def test_checkpoint_publishes_an_image(rig, counter):
    """checkpoint() of a process under phos run publishes a cow image and says its name, folder and stall"""
    ck = phos.checkpoint(counter.pid, wait_timeout=120)
    assert ck["pid"] == counter.pid
    assert ck["name"] == "1" and ck["protocol"] == "cow", ck
    assert ck["dir"] == os.path.join(rig.store, str(counter.pid), "1"), ck
    assert isinstance(ck["stall_ms"], float) and ck["stall_ms"] > 0, ck
    assert ck["status"]["last_job"] == "checkpoint cow name=1: done", ck["status"]
    assert ck["status"]["error"] is None
    assert _verified(rig, ck["dir"]), "%s does not verify" % ck["dir"]
    assert os.path.isdir(os.path.join(rig.mnt, str(counter.pid), "checkpoints", "1"))
    n = len(counter.counts())
    assert wait_for(lambda: len(counter.counts()) > n + 2, 10), "the counter did not run on"


def test_checkpoint_named_stop_without_wait(rig, counter):
    """checkpoint(protocol='stop', name=..., wait=False) returns at once; wait_checkpoint() then has it"""
    assert phos.checkpoint(counter.pid, protocol="stop", name="before-upgrade", wait=False) is None
    ck = phos.wait_checkpoint(counter.pid, wait_timeout=120)
    assert ck["name"] == "before-upgrade" and ck["protocol"] == "stop", ck
    assert _verified(rig, ck["dir"])


def test_restore_brings_a_killed_process_back(rig, counter):
    """restore() of a killed process's image returns its new pid, and it counts on from the checkpoint intact"""
    ck = phos.checkpoint(counter.pid, wait_timeout=120)
    # It prints every tenth count: the checkpoint holds one below at + 10.
    at = counter.counts()[-1]
    assert wait_for(lambda: counter.counts()[-1] >= at + 30, 15), "the counter did not run on"
    counter.kill()
    n = len(counter.counts())
    pid = phos.restore(ck["dir"], wait_timeout=120)
    counter.adopt(pid)
    assert pid != counter.pid and alive(pid)
    assert phos.status(pid)["state"] in ("running", "restoring")
    assert wait_for(lambda: len(counter.counts()) > n + 2, 15), "the restored counter did not count"
    assert counter.counts()[n] <= at + 10, "it did not go on from the checkpoint: %r" % counter.counts()
    os.kill(pid, signal.SIGUSR1)  # it checks every byte of its device memory
    assert wait_for(lambda: "verify ok" in open(counter.out).read(), 15), \
        open(counter.out).read().splitlines()[-3:]


def test_restore_eager_waits_for_all_memory(rig, counter):
    """restore(mode='eager', full=True) of a checkpoint that killed its process returns once all is back"""
    ck = phos.checkpoint(counter.pid, protocol="stop", kill=True, wait_timeout=120)
    assert wait_for(lambda: not alive(counter.pid), 10), "checkpoint(kill=True) left the process running"
    rid = phos.restore(ck["dir"], mode="eager", wait=False)
    assert isinstance(rid, int) and rid > 0
    pid = phos.wait_restore(rid, full=True, wait_timeout=120)
    counter.adopt(pid)
    st = phos.status()
    assert st["job"] is None and "fully_restored_ms" in st and st["restore"] == "eager", st
    assert alive(pid)


def test_a_wait_has_a_deadline(rig, counter):
    """a checkpoint still running at wait_timeout raises PhosTimeout and goes on; wait_checkpoint() finds it done"""
    with pytest.raises(phos.PhosTimeout) as e:
        phos.checkpoint(counter.pid, protocol="stop", wait_timeout=0.001)
    assert "still running after 0.001 s" in str(e.value) and "phos.cancel(%d)" % counter.pid in str(e.value)
    ck = phos.wait_checkpoint(counter.pid, wait_timeout=120)
    assert ck["protocol"] == "stop" and _verified(rig, ck["dir"])


def test_cancel_stops_a_checkpoint(rig):
    """cancel() stops a running checkpoint: the process runs on, nothing is published, and the wait says so"""
    from conftest import start_counter
    job = start_counter(rig, 256)
    try:
        phos.checkpoint(job.pid, protocol="stop", name="cancelled", wait=False)
        phos.cancel(job.pid)
        with pytest.raises(phos.PhosError) as e:
            phos.wait_checkpoint(job.pid, wait_timeout=120)
        assert "cancel" in str(e.value), str(e.value)
        assert not os.path.exists(os.path.join(rig.store, str(job.pid), "cancelled"))
        n = len(job.counts())
        assert wait_for(lambda: len(job.counts()) > n + 1, 10), "the counter did not run on"
        with pytest.raises(phos.PhosError, match="no job to cancel"):
            phos.cancel(job.pid)
    finally:
        job.end()
