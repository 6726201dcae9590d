# SPDX-License-Identifier: LGPL-2.1-or-later
"""Errors say what a person can act on."""

import errno
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

import phos
from conftest import alive, wait_for


def _free_pid():
    """A pid no process has."""
    pid = 4194000
    while os.path.exists("/proc/%d" % pid):
        pid -= 1
    return pid


def test_bad_arguments_raise_value_error():
    """bad pids, protocols, modes, names and deadlines raise ValueError naming what is wrong"""
    for pid in (0, -1, "12x", None, True, 1.5):
        with pytest.raises(ValueError, match="pid must be a positive integer"):
            phos.checkpoint(pid)
    with pytest.raises(ValueError, match="protocol must be one of cow, recopy, stop"):
        phos.checkpoint(1, protocol="fast")
    with pytest.raises(ValueError, match="mode must be one of lazy, eager"):
        phos.restore("/", mode="soon")
    with pytest.raises(ValueError, match="name must be one word"):
        phos.checkpoint(1, name="a kill")
    with pytest.raises(ValueError, match="wait_timeout must be more than 0"):
        phos.checkpoint(1, wait_timeout=0)


def test_not_mounted():
    """every call says phosfs is not mounted where it is not, and how to point at it"""
    with tempfile.TemporaryDirectory() as d:
        calls = [lambda: phos.checkpoint(1, mount=d), lambda: phos.restore(d, mount=d),
                 lambda: phos.status(1, mount=d), lambda: phos.status(mount=d), lambda: phos.events(mount=d),
                 lambda: phos.cancel(1, mount=d)]
        for call in calls:
            with pytest.raises(phos.PhosError) as e:
                call()
            assert str(e.value) == "phosfs is not mounted at %s (set PHOS_MOUNT, or pass mount=)" % d
            assert e.value.errno == errno.ENOENT


def test_no_such_process(rig):
    """checkpoint() and status() of a pid that does not run say there is no such process"""
    pid = _free_pid()
    for call in (phos.checkpoint, phos.status):
        with pytest.raises(phos.PhosError, match="^no such process: %d is not running, and phosfs knows no "
                           "checkpoint of it$" % pid):
            call(pid)


def test_phosfs_refusals_carry_its_words(rig, counter):
    """phosfs's own error text comes through: a bad name, a name taken, cow of an untraced process"""
    with pytest.raises(phos.PhosError) as e:
        phos.checkpoint(counter.pid, name="latest")
    assert str(e.value).startswith("bad command: bad name 'latest'") and e.value.errno == errno.EINVAL
    with pytest.raises(phos.PhosError, match="bad timeout '7200.0'"):
        phos.checkpoint(counter.pid, timeout=7200)
    phos.checkpoint(counter.pid, name="one", wait_timeout=120)
    with pytest.raises(phos.PhosError) as e:
        phos.checkpoint(counter.pid, name="one", wait_timeout=120)
    assert "one" in str(e.value) and "exist" in str(e.value), str(e.value)
    plain = subprocess.Popen(["sleep", "60"])
    try:
        with pytest.raises(phos.PhosError) as e:
            phos.checkpoint(plain.pid, protocol="cow", wait_timeout=60)
        assert "cow" in str(e.value) and e.value.errno == errno.EOPNOTSUPP, (str(e.value), e.value.errno)
    finally:
        plain.kill()
        plain.wait()


def test_restore_errors(rig, counter):
    """restore() of a missing folder, of a folder that is no image, and of a damaged image says why"""
    with pytest.raises(phos.PhosError, match="/nonexistent/ckpt: no such directory"):
        phos.restore("/nonexistent/ckpt")
    with tempfile.TemporaryDirectory() as d:
        with pytest.raises(phos.PhosError) as e:
            phos.restore(d, wait_timeout=60)
        assert os.path.join(d, "manifest.phos") in str(e.value) and e.value.errno, str(e.value)
    ck = phos.checkpoint(counter.pid, wait_timeout=120)
    counter.kill()
    with tempfile.TemporaryDirectory() as d:
        copy = os.path.join(d, "copy")
        subprocess.run(["cp", "-r", ck["dir"], copy], check=True)
        with open(os.path.join(copy, "gpu.data"), "r+b") as f:
            f.seek(4096)
            b = f.read(1)
            f.seek(4096)
            f.write(bytes([b[0] ^ 0xFF]))
        with pytest.raises(phos.PhosError) as e:
            counter.adopt(phos.restore(copy, mode="eager", full=True, wait_timeout=120))
        assert e.value.errno, str(e.value)
        assert "checksum" in str(e.value) or "corrupt" in str(e.value) or "damaged" in str(e.value), str(e.value)


PERMISSION = textwrap.dedent("""
    import os, sys
    os.setgid(65534)
    os.setuid(65534)
    import phos
    for call in (lambda: phos.checkpoint(int(sys.argv[1])), lambda: phos.restore("/tmp")):
        try:
            call()
            print("no error")
        except phos.PhosError as e:
            print(e)
""")


def test_permission_denied(rig, counter):
    """another user's checkpoint() and restore() say permission is denied, and who may"""
    p = subprocess.run([sys.executable, "-c", PERMISSION, str(counter.pid)], capture_output=True, text=True)
    lines = p.stdout.splitlines()
    assert len(lines) == 2, p.stdout + p.stderr
    assert lines[0].startswith("permission denied: only root and the owner of process %d may checkpoint it"
                               % counter.pid), lines[0]
    assert lines[1].startswith("permission denied: only root may restore"), lines[1]


def test_checkpoint_of_a_process_that_ends(rig, counter):
    """checkpoint(kill=True) ends the process and still says where its image is"""
    ck = phos.checkpoint(counter.pid, kill=True, wait_timeout=120)
    assert wait_for(lambda: not alive(counter.pid), 10)
    assert os.path.isdir(ck["dir"]) and ck["name"] == "1", ck
