# SPDX-License-Identifier: LGPL-2.1-or-later
"""phos.events() over a stand-in for MOUNT/events: a FIFO, fed by the test.

It needs no phosfs: the reader's own behaviour (lines in pieces, blank
lines, the filters, the timeout, the end of the file, a line that is not
JSON) is checked here; tests/test_events.py checks phosfs's events.
"""

import json
import os
import tempfile
import threading
import time

import pytest

import phos

EV = [
    {"seq": 1, "time": 1.0, "event": "checkpoint.started", "pid": 10, "name": "1", "protocol": "cow"},
    {"seq": 2, "time": 1.1, "event": "restore.started", "restore_id": 4, "dir": "/s/10/1"},
    {"seq": 3, "time": 1.2, "event": "checkpoint.started", "pid": 11, "name": "1", "protocol": "stop"},
    {"seq": 4, "time": 1.3, "event": "checkpoint.published", "pid": 10, "name": "1", "protocol": "cow",
     "dir": "/s/10/1", "stall_ms": 512.3, "error": None},
    {"seq": 5, "time": 1.4, "event": "restore.done", "restore_id": 4, "dir": "/s/10/1", "pid": 12},
]


class Writer:
    """The FIFO's writing end."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDWR)  # no wait for a reader

    def write(self, b):
        os.write(self.fd, b)

    def close(self):
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


@pytest.fixture
def fake_mount():
    """A folder that looks like a phosfs mount, its events a FIFO; yields
    (the folder, the FIFO's Writer)."""
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "version"), "w") as f:
            f.write("phosfs test\n")
        fifo = os.path.join(d, "events")
        os.mkfifo(fifo)
        w = Writer(fifo)
        try:
            yield d, w
        finally:
            w.close()


def _feed(w, events, pause=0.0):
    """Writes the events, each line in two pieces, with blank lines between."""
    for e in events:
        line = (json.dumps(e) + "\n").encode()
        w.write(line[:7])
        time.sleep(pause)
        w.write(line[7:] + b"\n")


def test_events_reader_yields_each_line(fake_mount):
    """events() yields each line's object in order, however the lines are cut"""
    d, w = fake_mount
    with phos.events(mount=d, timeout=5) as ev:
        t = threading.Thread(target=_feed, args=(w, EV, 0.01))
        t.start()
        got = [next(ev) for _ in EV]
        t.join()
    assert got == EV


def test_events_reader_filters(fake_mount):
    """events(names=..., pids=...) yields only the events named (or of a kind) and of the pids given"""
    d, w = fake_mount
    with phos.events(names="checkpoint", pids=10, mount=d, timeout=0.5) as ev:
        _feed(w, EV)
        assert [e["seq"] for e in ev] == [1, 4]
    with phos.events(names=["restore.done", "checkpoint.started"], mount=d, timeout=0.5) as ev:
        _feed(w, EV)
        assert [e["seq"] for e in ev] == [1, 3, 5]
    with pytest.raises(ValueError):
        phos.events(names=[""], mount=d)
    with pytest.raises(ValueError):
        phos.events(pids=["x"], mount=d)


def test_events_reader_times_out_and_ends(fake_mount):
    """events(timeout=...) ends after that long without an event; the file's end ends it too"""
    d, w = fake_mount
    with phos.events(mount=d, timeout=0.2) as ev:
        t0 = time.monotonic()
        assert list(ev) == []
        assert 0.19 <= time.monotonic() - t0 < 3
    with phos.events(mount=d) as ev:  # no timeout: the writer's close ends it
        _feed(w, EV[:1])
        assert next(ev) == EV[0]
        threading.Timer(0.1, w.close).start()
        assert list(ev) == []


def test_events_reader_rejects_a_line_that_is_not_json(fake_mount):
    """a line of MOUNT/events that is not JSON raises PhosError quoting it"""
    d, w = fake_mount
    with phos.events(mount=d, timeout=2) as ev:
        w.write(b"checkpoint started\n")
        with pytest.raises(phos.PhosError, match="not JSON.*checkpoint started"):
            next(ev)


def test_events_missing_says_phosfs_is_older():
    """events() where phosfs has no events file says so"""
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "version"), "w").close()
        with pytest.raises(phos.PhosError, match="this phosfs has no events"):
            phos.events(mount=d)
