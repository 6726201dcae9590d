#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# examples/kubernetes/pod.yaml: a pod spec whose preStop hook makes phos
# run checkpoint its job, and whose grace period is derived from the
# checkpoint it measured. Read with Python's yaml (no cluster here):
#
#   1. it is YAML, one Pod of v1;
#   2. its container runs phos run, with --name, and an action that
#      checkpoints and ends the job for TERM and for the signal the
#      preStop hook sends to phos run (pid 1 of the container);
#   3. terminationGracePeriodSeconds is ceil(factor * (stall + after the
#      stall)) + margin, from its annotations, as its comment and the
#      README derive it; phos run's --on-signal-timeout is below it;
#   4. the container sees phosfs's mount (its mounts propagated), the
#      store at the node's path, and phosfs's socket, where PHOS_MOUNT and
#      PHOS_SOCKET say;
#   5. phos takes the command line's options.
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=${PHOS_SRCDIR:-$here/../..}
phos=${PHOS_CLI:-$here/../phos}
spec=$src/examples/kubernetes/pod.yaml
[ -r "$spec" ] || { echo "1..0 # SKIP no $spec (set PHOS_SRCDIR)"; exit 0; }
python3 -c 'import yaml' 2>/dev/null || { echo "1..0 # SKIP no Python yaml (Debian's python3-yaml: make deps)"; exit 0; }
work=$(mktemp -d /tmp/phos-pod.XXXXXX)
trap 'rm -rf "$work"' EXIT

# Checks 1-4, in TAP, numbered from 1 (how many into $work/n; exit 1
# when one failed); the container's command (with $(POD_NAME) as a name)
# into $work/cmd, a NUL after each word.
python3 - "$spec" "$work" <<'EOF'
import math, re, sys, yaml

n = failed = 0
def check(ok, what):
    global n, failed
    n += 1
    failed |= not ok
    print(("ok" if ok else "not ok"), n, "-", what)
    return ok

with open(sys.argv[1]) as f:
    docs = list(yaml.safe_load_all(f))
pod = docs[0] if len(docs) == 1 and isinstance(docs[0], dict) else {}
check(pod.get("apiVersion") == "v1" and pod.get("kind") == "Pod", "the spec is YAML: one Pod of v1")
spec = pod.get("spec", {})
cs = spec.get("containers", [])
c = cs[0] if len(cs) == 1 else {}
cmd = [str(w) for w in c.get("command", [])]

def opts(name):
    return [cmd[i + 1] for i, w in enumerate(cmd[:-1]) if w == name and "--" not in cmd[:i]]

acts = dict(a.split("=", 1) for a in opts("--on-signal") if "=" in a)
hook = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
m = re.fullmatch(r"kill -(?:SIG)?([A-Z0-9]+) 1", hook[-1] if hook else "")
sent = m.group(1) if m else None
ends = lambda a: a is not None and a.endswith("-kill")
check(cmd[:2] == ["phos", "run"] and "--" in cmd and len(opts("--name")) == 1,
      "its container runs phos run, with --name, then the job's command")
check(sent is not None and sent != "TERM" and ends(acts.get(sent)),
      "the preStop hook sends phos run (pid 1) SIG%s, and phos run checkpoints the job on it and ends it (%s)"
      % (sent, acts.get(sent)))
check(ends(acts.get("TERM")), "TERM, without the hook, does the same (%s)" % acts.get("TERM"))

a = pod.get("metadata", {}).get("annotations", {})
try:
    stall, after = float(a["phos/stall-seconds"]), float(a["phos/after-stall-seconds"])
    factor, margin = float(a["phos/safety-factor"]), int(a["phos/margin-seconds"])
    want = math.ceil(factor * (stall + after)) + margin
except (KeyError, ValueError):
    want = None
grace = spec.get("terminationGracePeriodSeconds")
check(want is not None and grace == want and factor >= 1,
      "terminationGracePeriodSeconds (%s) = ceil(%s * (%s + %s)) + %s, from the measured checkpoint"
      % (grace, a.get("phos/safety-factor"), a.get("phos/stall-seconds"), a.get("phos/after-stall-seconds"),
         a.get("phos/margin-seconds")))
t = opts("--on-signal-timeout")
check(len(t) == 1 and t[0].isdigit() and int(t[0]) < (grace or 0),
      "phos run gives a checkpoint up (--on-signal-timeout %s) before the grace period ends" % (t or None))

env = {e["name"]: e.get("value") for e in c.get("env", [])}
mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
vols = {v["name"]: v.get("hostPath", {}).get("path") for v in spec.get("volumes", [])}
def host(path):
    m = mounts.get(path)
    return vols.get(m["name"]) if m else None
sock = env.get("PHOS_SOCKET") or ""
check(env.get("PHOS_MOUNT") in mounts and mounts[env["PHOS_MOUNT"]].get("mountPropagation") == "HostToContainer"
      and host(env["PHOS_MOUNT"]) == env["PHOS_MOUNT"],
      "the container sees phosfs's mount at PHOS_MOUNT (%s), the node's, as it is mounted" % env.get("PHOS_MOUNT"))
check(host("/var/lib/phos") == "/var/lib/phos" and host(sock.rsplit("/", 1)[0]) == sock.rsplit("/", 1)[0],
      "and the store, and phosfs's socket (%s), at the node's paths" % sock)
check(any(e.get("name") == "POD_NAME" and e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name"
          for e in c.get("env", [])) and opts("--name") == ["$(POD_NAME)"],
      "the job's name is the pod's (its images: STORE/jobs/NAME/latest)")
with open(sys.argv[2] + "/cmd", "wb") as f:
    f.write(b"".join(w.replace("$(POD_NAME)", "train").encode() + b"\0" for w in cmd))
with open(sys.argv[2] + "/n", "w") as f:
    f.write("%d\n" % n)
sys.exit(1 if failed else 0)
EOF
failed=$?
n=$(cat "$work/n" 2>/dev/null || echo 0)
[ "$n" -gt 0 ] || { echo "not ok 1 - the spec is read"; n=1; failed=1; }

# 5. phos takes the options: it gets past them, to phosfs (not mounted
# here), and exits 1, not 2.
n=$((n + 1))
if [ -x "$phos" ] && [ -s "$work/cmd" ]; then
	mapfile -d '' words <"$work/cmd"
	PHOS_MOUNT=$work/no-mount "$phos" "${words[@]:1}" >/dev/null 2>"$work/err"
	rc=$?
	if [ "$rc" = 1 ] && grep -q "phosfs is not mounted" "$work/err"; then
		echo "ok $n - phos takes the command line's options"
	else
		echo "not ok $n - phos takes the command line's options (exit $rc)"
		sed 's/^/# /' "$work/err"
		failed=1
	fi
else
	echo "ok $n # SKIP phos not built"
fi
echo "1..$n"
exit "$failed"
