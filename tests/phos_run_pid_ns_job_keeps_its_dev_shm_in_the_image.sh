#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# A job under phos run --pid-ns has a /dev/shm of its own, which its
# image carries. Its Python program shares memory with a child by name
# (multiprocessing.shared_memory, a file in /dev/shm, as PyTorch's CUDA
# IPC shares its reference counts): the parent writes 3*i there, the
# child opens the name afresh at each step and answers what it reads.
# The job ends at step 200 and removes the name, as such jobs do.
#   1. the job's /dev/shm is not the machine's: its name is not there;
#   2. a stop checkpoint at step 20 is published, and the job runs to
#      its end and removes its name;
#   3. the image restores after the job is gone (the name with it), and
#      goes on from step 20, every answer right;
#   4. restored again beside the first, 20 steps behind it, each has its
#      own /dev/shm: every answer of both right (a shared name would mix
#      their numbers);
#   5. the machine's /dev/shm never held the name.
# 3 and 4 skip where libphos.so carries ASan's runtime (make SANITIZE=1):
# Python with it preloaded dies of SIGSEGV in CRIU's restore here.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/phos_run_rig.bash
. "${PHOS_SRCDIR:-$here/../..}/tests/phos_run_rig.bash"
rig_require
command -v python3 >/dev/null || rig_skip "no python3"
python3 -c 'from multiprocessing import shared_memory' 2>/dev/null || rig_skip "python3 has no multiprocessing.shared_memory"
rig_mount

name=phos_test_shm_$$
cat >"$work/shm.py" <<'PY'
import multiprocessing as mp, sys, time
from multiprocessing import shared_memory
def child(name, q, r):
    while True:
        x = q.get()
        if x is None:
            break
        s = shared_memory.SharedMemory(name=name)
        r.put(int.from_bytes(bytes(s.buf[:8]), "little"))
        s.close()
if __name__ == "__main__":
    name = sys.argv[1]
    ctx = mp.get_context("spawn")
    shm = shared_memory.SharedMemory(name=name, create=True, size=4096)
    q, r = ctx.Queue(), ctx.Queue()
    ctx.Process(target=child, args=(name, q, r), daemon=True).start()
    for i in range(201):
        shm.buf[:8] = (3 * i).to_bytes(8, "little")
        q.put(i)
        got = r.get(timeout=30)
        print("step", i, "ok" if got == 3 * i else "WRONG %r" % got, flush=True)
        time.sleep(0.02)
    q.put(None)
    shm.close()
    shm.unlink()
    print("end", flush=True)
PY

"$phos" run -d --pid-ns -- python3 "$work/shm.py" "$name" >"$work/pid" 2>"$work/err"
pid=$(started "$work/pid" 30)
out=$store/run/$pid.out
wait_line "$out" '^step 10 ' 60
check "[ -e /proc/$pid/root/dev/shm/$name ] && [ ! -e /dev/shm/$name ]" \
	"the job's /dev/shm is its own: its name is there, not in the machine's"
if "$phos" checkpoint "$pid" stop --name s --wait >"$work/ck" 2>&1; then
	wait_line "$out" '^end' 60
	check "grep -q '^end' '$out' && ! grep -q WRONG '$out'" \
		"a stop checkpoint is published, and the job runs to its end, every answer right"
else
	tap "not ok" "the stop checkpoint failed: $(tail -2 "$work/ck" | tr '\n' ' ')"
fi
wait_gone "$pid" 10

# after FILE FROM: how many right step lines FILE has past byte FROM.
after() { tail -c +$(($2 + 1)) "$1" | grep -c '^step .* ok$'; }
# restore_again N TEXT: restores the image once more, and checks that it
# goes on with 20 right steps past the output so far, none wrong.
restore_again() {
	local off r
	off=$(stat -c %s "$out")
	r=$("$phos" restore "$store/$pid/s" 2>"$work/rs$1")
	case $r in '' | *[!0-9]*) r=none ;; *) note "$r" ;; esac
	for _ in $(seq 150); do [ "$(after "$out" "$off")" -ge $((20 * $1)) ] && break; sleep 0.1; done
	check "[ \"\$(after '$out' $off)\" -ge $((20 * $1)) ] && ! tail -c +$((off + 1)) '$out' | grep -q WRONG" \
		"$2 ($(tail -1 "$work/rs$1"))"
}
if ldd "${PHOS_LIBPHOS:-}" 2>/dev/null | grep -q libasan; then
	for _ in 1 2; do
		rig_n=$((rig_n + 1))
		echo "ok $rig_n # skip libphos.so carries ASan's runtime, with which Python does not survive CRIU's restore"
	done
else
	restore_again 1 "the image restores after the job and its name are gone, and goes on, every answer right"
	restore_again 2 "restored again beside the first, each with a /dev/shm of its own, every answer right"
	wait_line "$out" '^end' 60
fi
check "[ ! -e /dev/shm/$name ]" "the machine's /dev/shm never held the job's name"
done_testing
