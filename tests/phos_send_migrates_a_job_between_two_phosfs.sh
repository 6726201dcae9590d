#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# phos send and phos receive migrate a job between two phosfs, each in a
# mount namespace of its own, with its own mount, store and socket (the
# same path in each namespace, as /run/phos is on two machines), on
# simcuda. examples/counter runs on node A under `phos run --pid-ns`.
#
#   1. `phos send PID recopy --kill -- nsenter … phos receive`: node B
#      has the whole image, restores it and the job runs there, its
#      device memory exact; the job on A ended only then, and its output
#      goes on from the checkpoint with no count twice (A held it,
#      stopped, from the final stall on);
#   2. a stream cut midway: phos send says so and the job on A runs on,
#      exact; B keeps no half image;
#   3. what is no stream of phos send is refused, and nothing is kept;
#   4. without --kill, through a plain pipe: B has the image, not
#      restored (--no-restore), and the job on A runs on;
#   5. --kill without a command that can answer is refused;
#   6. through a slow link (3 MB/s), B restores the job as soon as all
#      but the rest of gpu.data has come, and the job runs there while it
#      comes, its device memory exact, no count twice;
#   7. the slow link cut once B has restored the job: B ends it and keeps
#      nothing, and the job on A runs on, exact.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/phos_run_rig.bash
. "${PHOS_SRCDIR:-$here/../..}/tests/phos_run_rig.bash"
# shellcheck source=tests/nodes.bash
. "${PHOS_SRCDIR:-$here/../..}/tests/nodes.bash"
rig_require
command -v unshare >/dev/null && command -v nsenter >/dev/null || rig_skip "no unshare or nsenter (util-linux)"

work=$(mktemp -d /tmp/phos-send-test.XXXXXX)
: >"$work/pids"
export PHOS_SOCKET=$work/run/sock
export PHOS_LIBPHOS=${PHOS_LIBPHOS:-$(dirname "$phos")/libphos.so}
export LD_LIBRARY_PATH=${rig_driver-${PHOS_SIMCUDA:-$(dirname "$phos")/simcuda}}
export ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0
plugins=()
[ -n "${PHOS_CRIU_PLUGINS:-}" ] && plugins=(--criu-plugins "$PHOS_CRIU_PLUGINS")

cleanup() {
	nodes_end
	if [ "$rig_failed" != 0 ]; then
		for f in "$work"/a.log "$work"/b.log "$work"/*.err; do
			[ -s "$f" ] && tail -n 15 "$f" | sed "s|^|# $(basename "$f"): |" >&2
		done
	fi
	rm -rf "$work"
}
trap cleanup EXIT
for n in a b; do
	node "$n" "$rig_phosfs" "$rig_criu" "${plugins[@]}" && continue
	echo "Bail out! phosfs of node $n did not mount (its log follows)"
	sed 's/^/# /' "$work/$n.log"
	exit 1
done

# Starts examples/counter on node A; its pid into $pid, its output $out.
start() {
	on a "$phos" run --pid-ns -- "$counter" 8 >"$work/pid.$1" 2>"$work/run.$1.err" &
	pid=$(started "$work/pid.$1" 30)
	out=$work/a/store/run/$pid.out
	wait_line "$out" '^count 20$' 20
}
# Whether every count in file $1 is 10 more than the one before.
counts_go_on() {
	awk '/^count [0-9]+$/ { if (seen && $2 != last + 10) bad = 1; last = $2; seen = 1 } END { exit bad || !seen }' "$1"
}
pimg=${PHOS_IMAGE_TOOL:-$(dirname "$phos")/phos-image}
receive=(nsenter -t "$(cat "$work/b.pid")" -m -- env PHOS_MOUNT="$work/b/mnt" "$phos" receive)

# 1. A migration.
start 1
before=$(last_count "$out")
on a "$phos" send "$pid" recopy --kill --name move -- "${receive[@]}" 2>"$work/send.1.err"
rc=$?
image=$work/b/store/received/$pid-move
back=$(sed -n 's/.*restored there as \([0-9]*\).*/\1/p' "$work/send.1.err")
check '[ "$rc" = 0 ] && grep -q "process $pid ended" "$work/send.1.err" && [ -n "$back" ]' \
	"phos send --kill: B received the whole image and restored it (as $back), then A's job ended (exit $rc)"
note "$back"
check 'wait_gone "$pid" 10 && ! ls "$work/a/mnt" | grep -qx "$pid"' "the job on A is gone"
check '"$pimg" verify "$image" >/dev/null' \
	"B's store holds the image, and it verifies ($image)"
check 'on b "$phos" ls | grep -q "^$back "' "the job runs on B, under B's phosfs"
kill -USR1 "$back"
check 'wait_line "$out" "^verify ok count" 20 && wait_line "$out" "^count $((before + 30))\$" 20' \
	"its device memory came back exact on B, and it counts on ($before before the move)"
check 'counts_go_on "$out"' "its output goes on from the checkpoint: no count twice, none left out"

# 2. A stream cut midway.
start 2
on a "$phos" send "$pid" recopy --kill -- sh -c 'head -c 300000 | "$@"' _ "${receive[@]}" 2>"$work/send.2.err"
rc=$?
check '[ "$rc" = 1 ] && grep -q "process $pid runs on" "$work/send.2.err"' \
	"a stream cut midway: phos send says the job runs on ($(tail -1 "$work/send.2.err"))"
c=$(last_count "$out")
kill -USR1 "$pid"
check 'alive "$pid" && wait_line "$out" "^count $((c + 20))\$" 20 && [ "$(grep -c "^verify ok" "$out")" = 1 ]' \
	"and it does, its device memory exact"
check '[ "$(ls -A "$work/b/store/received")" = "$(basename "$image")" ]' \
	"B keeps no half image ($(ls -A "$work/b/store/received" | tr '\n' ' '))"

# 3. Not a stream of phos send.
head -c 5000 /dev/urandom | "${receive[@]}" >"$work/recv.3.out" 2>"$work/recv.3.err"
rc=$?
check '[ "$rc" = 1 ] && grep -q "^error: what came is no stream of phos send" "$work/recv.3.out" &&
	[ "$(ls -A "$work/b/store/received" | wc -l)" = 1 ]' \
	"what is no stream of phos send is refused, and nothing is kept ($(cat "$work/recv.3.err"))"

# 4. Without --kill, through a plain pipe.
on a "$phos" send "$pid" cow --name copy 2>"$work/send.4.err" | "${receive[@]}" --no-restore >"$work/recv.4.out" 2>&1
check 'grep -q "^received $work/b/store/received/$pid-copy\$" "$work/recv.4.out" && alive "$pid" &&
	"$pimg" verify "$work/b/store/received/$pid-copy" >/dev/null' \
	"through a plain pipe, without --kill: B has the image, and the job on A runs on"

# The receiving end through a slow link: a copy at 3 MB/s, whose pid is
# in $work/slow.pid.
cat >"$work/slow.py" <<'EOF'
import os, sys, time
open(sys.argv[2], "w").write(str(os.getpid()))
rate, src, dst = int(sys.argv[1]), sys.stdin.buffer, sys.stdout.buffer
while True:
    b = src.read1(65536)
    if not b:
        break
    dst.write(b)
    dst.flush()
    time.sleep(len(b) / rate)
EOF
slow=(sh -c 'w=$1 r=$2; shift 2; python3 "$w/slow.py" "$r" "$w/slow.pid" | "$@"' _ "$work" 3000000 "${receive[@]}")

# 5. --kill needs the other end's answer.
on a "$phos" send "$pid" recopy --kill >/dev/null 2>"$work/send.5.err"
rc=$?
check '[ "$rc" = 2 ] && grep -q "give the command that reaches it" "$work/send.5.err" && alive "$pid"' \
	"--kill without a command is refused, and the job runs on"

# 6. Through a slow link: B runs the job while its memory comes.
on a "$phos" send "$pid" recopy --kill --name slow -- "${slow[@]}" 2>"$work/send.6.err"
rc=$?
back=$(sed -n 's/.*restored there as \([0-9]*\).*/\1/p' "$work/send.6.err")
note "$back"
check '[ "$rc" = 0 ] && grep -q "restored as process $back, while the rest of its device memory comes" "$work/send.6.err" &&
	wait_gone "$pid" 10' \
	"through a slow link, B restored the job before the rest of gpu.data came, then A's job ended"
c=$(last_count "$out")
kill -USR1 "$back"
check 'wait_line "$out" "^verify ok count" 20 && wait_line "$out" "^count $((c + 20))\$" 20 && counts_go_on "$out"' \
	"it runs on B, its device memory exact, no count twice"

# 7. The slow link cut once B runs the job.
start 7
rm -f "$work/slow.pid"
# The link takes 20 s for the stream (case 4 says how long it is): the
# cut comes while much of gpu.data is still on its way.
bytes=$(sed -n 's/.*: \([0-9]*\) bytes sent.*/\1/p' "$work/send.4.err")
slow[5]=$((${bytes:-10000000} / 20))
t0=$(date +%s.%N)
on a "$phos" send "$pid" recopy --kill --name cut -- "${slow[@]}" 2>"$work/send.7.err" &
sender=$!
wait_line "$work/send.7.err" "while the rest of its device memory comes" 60
early=$(sed -n 's/.*restored as process \([0-9]*\), while.*/\1/p' "$work/send.7.err")
echo "# B ran the job $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s after phos send began"
kill "$(cat "$work/slow.pid")"
wait "$sender"
rc=$?
c=$(last_count "$out")
kill -USR1 "$pid"
check '[ "$rc" = 1 ] && [ -n "$early" ] && wait_gone "$early" 10 && grep -q "process $pid runs on" "$work/send.7.err"' \
	"the link cut once B ran the job: B ended it (it was $early), and phos send says A's job runs on"
check 'alive "$pid" && wait_line "$out" "^count $((c + 20))\$" 20 && [ "$(grep -c "^verify ok" "$out")" = 1 ] &&
	[ ! -e "$work/b/store/received/$pid-cut" ] && [ -z "$(ls -A "$work/b/store/received" | grep "^\.")" ]' \
	"and it does, exact; B keeps nothing of it"
done_testing
