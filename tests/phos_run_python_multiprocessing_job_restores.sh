#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# A Python job that hands work to a child through multiprocessing's
# queues (the spawn start method, as torch.multiprocessing uses), under
# phos run with a real phosfs. Its queues' locks are POSIX semaphores,
# which glibc makes as a temporary file in /dev/shm, maps, and links
# under another name: CRIU used to fail the dump ("Can't create link
# remap"); phos's CRIU dumps such a file whole into the image
# (mk/criu-patches/0005).
#   1. a stop checkpoint of the job is published, and it runs on;
#   2. killed, its image restores, and the job goes on from its step,
#      every answer of the child right;
#   3. the same image restores again, beside the first restore: each has
#      a semaphore of its own.
# 2 and 3 skip where libphos.so carries ASan's runtime (make SANITIZE=1):
# Python with it preloaded dies of SIGSEGV in CRIU's restore here.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/phos_run_rig.bash
. "${PHOS_SRCDIR:-$here/../..}/tests/phos_run_rig.bash"
rig_require
command -v python3 >/dev/null || rig_skip "no python3"
rig_mount

cat >"$work/queues.py" <<'PY'
import multiprocessing as mp, sys, time
def child(q, r):
    while True:
        x = q.get()
        if x is None:
            break
        r.put(x * 2)
if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q, r = ctx.Queue(), ctx.Queue()
    ctx.Process(target=child, args=(q, r), daemon=True).start()
    i = 0
    while True:
        q.put(i)
        got = r.get(timeout=30)
        print("step", i, "ok" if got == 2 * i else "WRONG %r" % got, flush=True)
        i += 1
        time.sleep(0.02)
PY

"$phos" run -d --pid-ns -- python3 "$work/queues.py" >"$work/pid" 2>"$work/err"
pid=$(started "$work/pid" 30)
out=$store/run/$pid.out
wait_line "$out" '^step 20 ' 60
if "$phos" checkpoint "$pid" stop --name s --wait >"$work/ck" 2>&1; then
	check "wait_line '$out' '^step 60 ' 30" "a stop checkpoint of the Python job is published, and it runs on"
else
	tap "not ok" "the stop checkpoint failed: $(tail -2 "$work/ck" | tr '\n' ' ')"
fi

# after FILE FROM: how many right step lines FILE has past byte FROM.
after() { tail -c +$(($2 + 1)) "$1" | grep -c '^step .* ok$'; }
init=$(job_init "$pid") && kill -9 "$init"
kill -9 "$pid" 2>/dev/null
wait_gone "$pid" 10
# restore_again N TEXT: restores the image once more (its pid into rN),
# and checks that it goes on with N right steps past the output so far,
# and that every restore made so far still runs.
restore_again() {
	local off r
	off=$(stat -c %s "$out")
	r=$("$phos" restore "$store/$pid/s" 2>"$work/rs$1")
	case $r in '' | *[!0-9]*) r=none ;; *) note "$r" ;; esac
	restored+=("$r")
	for _ in $(seq 100); do [ "$(after "$out" "$off")" -ge $((20 * $1)) ] && break; sleep 0.1; done
	local all=1
	for r in "${restored[@]}"; do alive "$r" || all=0; done
	check "[ $all = 1 ] && [ \"\$(after '$out' $off)\" -ge $((20 * $1)) ] && ! grep -q WRONG '$out'" \
		"$2 ($(tail -1 "$work/rs$1"))"
}
restored=()
if ldd "${PHOS_LIBPHOS:-}" 2>/dev/null | grep -q libasan; then
	for _ in 1 2; do
		rig_n=$((rig_n + 1))
		echo "ok $rig_n # skip libphos.so carries ASan's runtime, with which Python does not survive CRIU's restore"
	done
else
	restore_again 1 "killed, its image restores, and the job goes on, every answer right"
	restore_again 2 "the same image restores again beside the first, both go on"
fi
done_testing
