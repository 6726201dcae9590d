# SPDX-License-Identifier: LGPL-2.1-or-later
"""A real phosfs on a temporary mount, with simcuda as its driver, for the
tests of the phos package (as tests/phosfs_test.h makes one for the C
tests); and, when $PHOS_PY_TAP names a file, a line of TAP there for each
test, named by the first line of its docstring
(tests/python_package_drives_phosfs.sh turns them into prove's TAP).

The programs come from the environment the Makefile's TEST_ENV gives:
PHOS_PHOSFS, PHOS_CLI, PHOS_LIBPHOS, PHOS_CRIU, PHOS_CRIU_PLUGINS,
PHOS_SIMCUDA, PHOS_COUNTER.
"""

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

# ---- TAP -------------------------------------------------------------------

_results = {}


def _describe(item):
    """A test's TAP name: its docstring's first line, else its name."""
    obj = getattr(item, "obj", None)
    doc = (obj.__doc__ or "").strip() if obj is not None else ""
    return doc.split("\n", 1)[0].rstrip(".") if doc else item.name.replace("test_", "", 1).replace("_", " ")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    rep.phos_desc = _describe(item)


def pytest_runtest_logreport(report):
    r = _results.setdefault(report.nodeid, {"desc": getattr(report, "phos_desc", report.nodeid),
                                             "failed": False, "skip": None, "why": ""})
    if report.failed:
        r["failed"] = True
        crash = getattr(report.longrepr, "reprcrash", None)
        text = (crash.message if crash else report.longreprtext).strip().splitlines()
        r["why"] = "%s: %s" % (report.when, text[0] if text else "failed")
    elif report.skipped and r["skip"] is None:
        lr = report.longrepr
        r["skip"] = lr[2] if isinstance(lr, tuple) else str(lr)


def pytest_runtest_logfinish(nodeid, location):
    path = os.environ.get("PHOS_PY_TAP")
    r = _results.pop(nodeid, None)
    if not path or r is None:
        return
    desc = re.sub(r"[#\n]", " ", r["desc"])
    if r["failed"]:
        line = "not ok - %s\n# %s\n" % (desc, r["why"].replace("\n", " "))
    elif r["skip"] is not None:
        line = "ok - %s # SKIP %s\n" % (desc, r["skip"].replace("Skipped: ", "", 1).replace("\n", " "))
    else:
        line = "ok - %s\n" % desc
    with open(path, "a") as f:
        f.write(line)


# ---- the rig ---------------------------------------------------------------

PR_SET_CHILD_SUBREAPER = 36


def _program(env, default_rel):
    """A program the environment names, else where a build keeps it."""
    p = os.environ.get(env)
    if p:
        return p
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(src, "build", default_rel)


def reap():
    """Reaps whatever ended among our children (and adopted processes)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def alive(pid):
    """Whether pid runs (a zombie does not)."""
    reap()
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def mounted(path):
    """Whether a file system is mounted at path (a dead one too)."""
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == path for line in f if len(line.split()) > 1)


def stop_phosfs(fs, mnt):
    """Stops phosfs (a Popen) with one SIGTERM (a second one may kill it
    before it unmounts), or SIGKILL if it does not end; then takes away a
    mount it left, dead, at mnt."""
    if fs.poll() is None:
        fs.send_signal(signal.SIGTERM)
    try:
        fs.wait(30)
    except subprocess.TimeoutExpired:
        fs.kill()
        fs.wait()
    if mounted(mnt):
        subprocess.run(["umount", "-l", mnt], stderr=subprocess.DEVNULL)


def wait_for(cond, seconds, step=0.05):
    """Polls cond until it is true, for up to seconds; its last value."""
    end = time.monotonic() + seconds
    while True:
        v = cond()
        if v or time.monotonic() > end:
            return v
        time.sleep(step)


class Rig:
    """phosfs mounted on a temporary folder; the programs the tests run."""

    def __init__(self):
        self.phosfs = _program("PHOS_PHOSFS", "phosfs/phosfs")
        self.phos = _program("PHOS_CLI", "phos")
        self.libphos = _program("PHOS_LIBPHOS", "libphos.so")
        self.criu = os.environ.get("PHOS_CRIU") or os.path.join(
            os.path.dirname(os.path.dirname(self.phos)), "deps/criu/sbin/criu")
        self.simcuda = _program("PHOS_SIMCUDA", "simcuda")
        self.counter = _program("PHOS_COUNTER", "examples/counter")
        self.image_tool = os.path.join(os.path.dirname(self.phos), "phos-image")
        self.dir = self.mnt = self.store = None
        self.fs = None

    def require(self):
        """Skips (with the reason) unless this machine can run phosfs."""
        if os.geteuid() != 0:
            pytest.skip("needs root (FUSE and CRIU)")
        if not os.access("/dev/fuse", os.R_OK | os.W_OK):
            pytest.skip("no /dev/fuse")
        if not os.access(self.criu, os.X_OK):
            pytest.skip("no CRIU (make deps)")
        for p in (self.phosfs, self.phos, self.counter, self.libphos):
            if not os.access(p, os.R_OK):
                pytest.skip("%s is not built" % p)

    def start(self):
        self.dir = tempfile.mkdtemp(prefix="phos-py.", dir="/tmp")
        os.chmod(self.dir, 0o755)  # for the tests of another user's calls
        self.mnt = os.path.join(self.dir, "mnt")
        self.store = os.path.join(self.dir, "store")
        os.mkdir(self.mnt)
        sock = os.path.join(self.dir, "sock")
        os.environ.update({
            "PHOS_MOUNT": self.mnt, "PHOS_SOCKET": sock, "PHOS_LIBPHOS": self.libphos,
            "LD_LIBRARY_PATH": self.simcuda,
            # ASan builds: the tracer is preloaded ahead of the runtime.
            "ASAN_OPTIONS": "verify_asan_link_order=0:detect_leaks=0",
        })
        argv = [self.phosfs, "--socket", sock, "--store", self.store, "--criu", self.criu, "-f"]
        plugins = os.environ.get("PHOS_CRIU_PLUGINS")
        if plugins:
            argv += ["--criu-plugins", plugins]
        self.log = open(os.path.join(self.dir, "phosfs.log"), "ab")
        self.fs = subprocess.Popen(argv + [self.mnt], stdin=subprocess.DEVNULL, stdout=self.log,
                                   stderr=self.log)
        if not wait_for(lambda: os.path.exists(os.path.join(self.mnt, "version")), 10):
            self.stop()
            pytest.fail("phosfs did not mount: " + self.log_tail())

    def log_tail(self, n=30):
        try:
            with open(os.path.join(self.dir, "phosfs.log"), errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return "(no log)"

    def stop(self):
        if self.fs is not None:
            stop_phosfs(self.fs, self.mnt)
            self.fs = None
            self.log.close()
        if self.dir and not os.environ.get("PHOS_TEST_KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def out(self, pid):
        """The output file of a job of phos run."""
        return os.path.join(self.store, "run", "%d.out" % pid)

    def phos_run(self, argv, detach=True, timeout=60):
        """Runs argv under `phos run --pid-ns`; with detach, returns the pid
        it prints, else the CompletedProcess."""
        cmd = [self.phos, "run"] + (["-d"] if detach else []) + ["--pid-ns", "--"] + list(argv)
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        if not detach:
            return p
        assert p.returncode == 0 and p.stdout.strip().isdigit(), "phos run failed: %s" % p.stderr
        return int(p.stdout.strip())


class Job:
    """A process the test started (and the ones restored from it), killed
    at the end."""

    def __init__(self, rig, pid):
        self.rig, self.pid, self.pids = rig, pid, [pid]

    @property
    def out(self):
        return self.rig.out(self.pid)

    def counts(self):
        """The counts the counter printed so far."""
        try:
            with open(self.out) as f:
                return [int(m.group(1)) for m in re.finditer(r"^count (\d+)$", f.read(), re.M)]
        except OSError:
            return []

    def kill(self, pid=None):
        """Kills pid (the job's, by default) with SIGKILL; waits until it is gone."""
        pid = pid or self.pid
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        assert wait_for(lambda: not alive(pid), 10), "process %d did not die" % pid

    def adopt(self, pid):
        """A restored process of this job: killed at the end too."""
        self.pids.append(pid)

    def end(self):
        for p in self.pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        wait_for(lambda: not any(alive(p) for p in self.pids), 10)


@pytest.fixture(scope="session")
def rig(request):
    """phosfs on a temporary mount ($PHOS_MOUNT names it), for the session."""
    r = Rig()
    r.require()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    r.start()
    yield r
    if request.session.testsfailed:
        sys.stderr.write("".join("# phosfs: " + line for line in r.log_tail().splitlines(True)))
    r.stop()


def start_counter(rig, mib=16):
    """examples/counter MIB under phos run, once it counts and is traced."""
    pid = rig.phos_run([rig.counter, str(mib)])
    job = Job(rig, pid)
    status = os.path.join(rig.mnt, str(pid), "status")

    def up():
        if not job.counts():
            return False
        try:
            with open(status) as f:
                return "traced: yes" in f.read()
        except OSError:
            return False

    if not wait_for(up, 30):
        job.end()
        pytest.fail("counter %d did not start under phos run (its output: %s)" % (pid, job.out))
    return job


@pytest.fixture
def counter(rig):
    """examples/counter (16 MiB of device memory) under phos run."""
    job = start_counter(rig)
    yield job
    job.end()
