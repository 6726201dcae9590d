# SPDX-License-Identifier: LGPL-2.1-or-later
"""phos.status(): status.json, or the status text read into the same shape."""

import json
import os

import pytest

import phos

TEXT = """pid: 30246
pid in its namespace: 2
job root: 30245 (a checkpoint takes its whole tree)
state: running
members: 2
member: 30245 phos-init gpu=none
member: 30246 counter gpu=traced
job: none
last job: checkpoint cow name=1: done
stall ms: 110.7
steps ms: cut 0.3 park 12.5 driver-checkpoint 6.7 publish 76.8
park ms: handed over 11.1 released 1.3 kept 0.0 (2 objects)
criu pages: 142 written, 0 shared
off gpu: 18874368/18874368 bytes
staging: 33554432 bytes (pinned in 43.1 ms)
cow shadows: 2 (6291456 bytes)
cow waits: 0 (0.0 ms)
restore 3: queued restore /x lazy
error: none
"""


def test_status_text_reads_as_status_json_does():
    """the status text is read into the shape of status.json: numbers, pairs, members, none"""
    st = phos.parse_status(TEXT)
    assert st == {
        "pid": 30246, "pid_in_its_namespace": 2, "job_root": 30245, "state": "running",
        "members": [{"pid": 30245, "comm": "phos-init", "gpu": "none"},
                    {"pid": 30246, "comm": "counter", "gpu": "traced"}],
        "job": None, "last_job": "checkpoint cow name=1: done", "stall_ms": 110.7,
        "steps_ms": {"cut": 0.3, "park": 12.5, "driver_checkpoint": 6.7, "publish": 76.8},
        "park_ms": {"handed_over": 11.1, "released": 1.3, "kept": 0.0, "objects": 2},
        "criu_pages": {"written": 142, "shared": 0},
        "off_gpu": {"done": 18874368, "total": 18874368},
        "staging": {"bytes": 33554432, "note": "pinned in 43.1 ms"},
        "cow_shadows": {"bytes": 6291456, "count": 2},
        "cow_waits": {"ms": 0.0, "count": 0},
        "pending": [{"id": 3, "state": "queued", "job": "restore /x lazy"}],
        "error": None,
    }


def test_status_of_a_process(rig, counter):
    """status(pid) and status() give the process's and phosfs's status as dicts"""
    st = phos.status(counter.pid)
    assert st["state"] == "running" and st["traced"] == "yes" and st["job"] is None, st
    assert st["pid"] == counter.pid and st["error"] is None
    assert [m["comm"] for m in st["members"]] == ["phos-init", "counter"], st["members"]
    assert phos.status(str(counter.pid))["pid"] == counter.pid
    root = phos.status()
    assert root["job"] is None and "restores" in root, root


def test_status_json_agrees_with_the_text(rig, counter):
    """where phosfs has status.json, it says what the status text does"""
    base = os.path.join(rig.mnt, str(counter.pid))
    if not os.path.exists(os.path.join(base, "status.json")):
        pytest.skip("this phosfs has no status.json (MOUNT/PID/status.json)")
    phos.checkpoint(counter.pid, wait_timeout=120)
    for _ in range(20):  # the two files are made at two moments
        text = open(os.path.join(base, "status")).read()
        js = json.load(open(os.path.join(base, "status.json")))
        if text == open(os.path.join(base, "status")).read():
            break
    assert js == phos.parse_status(text)
    assert phos.status(counter.pid) == js
