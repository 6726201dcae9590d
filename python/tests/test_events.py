# SPDX-License-Identifier: LGPL-2.1-or-later
"""phos.events(): the events of MOUNT/events, in order.

These need phosfs's events file (MOUNT/events, one JSON object a line);
they skip, saying so, on a phosfs without it.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import pytest

import phos
from conftest import start_counter, stop_phosfs, wait_for

CHECKPOINT_ORDER = ["checkpoint.started", "checkpoint.stalled", "checkpoint.resumed", "checkpoint.off_gpu",
                    "checkpoint.published"]


@pytest.fixture
def has_events(rig):
    if not os.path.exists(os.path.join(rig.mnt, "events")):
        pytest.skip("this phosfs has no events file (MOUNT/events)")


def _until(ev, last):
    seen = []
    for e in ev:
        seen.append(e)
        if e["event"] in last:
            break
    return seen


def test_events_follow_a_checkpoint(rig, counter, has_events):
    """events(pids=...) yields a cow checkpoint's events in order, with its name, folder and stall"""
    with phos.events(pids=counter.pid, timeout=60) as ev:
        ck = phos.checkpoint(counter.pid, wait_timeout=120)
        seen = _until(ev, ("checkpoint.published", "checkpoint.failed"))
    names = [e["event"] for e in seen]
    assert names == CHECKPOINT_ORDER, names
    assert all(e["pid"] == counter.pid and e["name"] == ck["name"] and e["protocol"] == "cow" for e in seen), seen
    seqs, times = [e["seq"] for e in seen], [e["time"] for e in seen]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs) and times == sorted(times), seen
    assert abs(times[-1] - time.time()) < 60, "time is not seconds since the epoch: %r" % times[-1]
    pub = seen[-1]
    assert pub["dir"] == ck["dir"] and pub.get("error") is None, pub
    assert abs(pub["stall_ms"] - ck["stall_ms"]) < 1, (pub, ck["stall_ms"])


def test_events_follow_a_restore(rig, counter, has_events):
    """events(names='restore') yields a restore's events in order, with its id, folder and pid"""
    ck = phos.checkpoint(counter.pid, wait_timeout=120)
    counter.kill()
    with phos.events(names="restore", timeout=60) as ev:
        rid = phos.restore(ck["dir"], wait=False)
        seen = _until(ev, ("restore.done", "restore.failed"))
    pid = phos.wait_restore(rid, full=True, wait_timeout=60)
    counter.adopt(pid)
    assert [e["event"] for e in seen] == ["restore.started", "restore.resumed", "restore.done"], seen
    assert all(e["restore_id"] == rid and e["dir"] == ck["dir"] for e in seen), seen
    assert seen[1]["pid"] == pid and seen[2]["pid"] == pid, seen


def test_events_of_a_failed_checkpoint(rig, has_events):
    """a checkpoint that fails (cancelled) gives checkpoint.failed with phosfs's error"""
    job = start_counter(rig, 256)
    try:
        with phos.events(names=["checkpoint.failed", "checkpoint.published"], pids=[job.pid], timeout=60) as ev:
            phos.checkpoint(job.pid, protocol="stop", name="cancelled", wait=False)
            phos.cancel(job.pid)
            with pytest.raises(phos.PhosError) as e:
                phos.wait_checkpoint(job.pid, wait_timeout=120)
            seen = _until(ev, ("checkpoint.failed", "checkpoint.published"))
    finally:
        job.end()
    assert [s["event"] for s in seen] == ["checkpoint.failed"], seen
    assert seen[0]["name"] == "cancelled" and seen[0]["error"] and seen[0]["error"] in str(e.value), \
        (seen, str(e.value))


def test_events_end_at_their_timeout(rig, has_events):
    """events(timeout=...) ends its iteration when no event came for that long"""
    t0 = time.monotonic()
    with phos.events(names="no.such.event", timeout=0.3) as ev:
        assert list(ev) == []
    assert 0.29 <= time.monotonic() - t0 < 5


def test_events_say_when_phosfs_goes_away(rig, has_events):
    """a wait on events() raises PhosError when phosfs stops, saying it went away"""
    d = tempfile.mkdtemp(prefix="phos-py-gone.", dir="/tmp")
    mnt = os.path.join(d, "mnt")
    os.mkdir(mnt)
    fs = subprocess.Popen([rig.phosfs, "--socket", os.path.join(d, "sock"), "--store", os.path.join(d, "store"),
                           "--criu", rig.criu, "-f", mnt], stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: os.path.exists(os.path.join(mnt, "version")), 10), "phosfs did not mount"
        with phos.events(mount=mnt) as ev:
            stop = threading.Timer(0.3, fs.send_signal, (signal.SIGTERM,))
            stop.start()
            with pytest.raises(phos.PhosError, match="phosfs went away"):
                next(ev)
            stop.join()
    finally:
        stop_phosfs(fs, mnt)
        shutil.rmtree(d, ignore_errors=True)
