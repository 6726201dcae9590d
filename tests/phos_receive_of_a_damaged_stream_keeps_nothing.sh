#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# phos receive, fuzzed: the stream of a real checkpoint (examples/counter
# under a real phosfs, on simcuda, `phos send PID cow`), damaged 300 ways
# (bytes flipped in the head, in records' heads and in their data, the
# stream cut, records dropped, repeated or swapped), is each time either
# received whole or refused with an answer and exit status 1; never a
# crash, and nothing but whole images that verify is left behind.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/phos_run_rig.bash
. "${PHOS_SRCDIR:-$here/../..}/tests/phos_run_rig.bash"
rig_require
rig_mount
pimg=${PHOS_IMAGE_TOOL:-$(dirname "$phos")/phos-image}
n=${PHOS_RECEIVE_FUZZ:-300}

"$phos" run -- "$counter" 4 >"$work/pid" 2>"$work/run.err" &
pid=$(started "$work/pid" 30)
"$phos" send "$pid" cow --name fuzz >"$work/stream" 2>"$work/send.err"
"$phos" receive --no-restore --dir "$work/whole" <"$work/stream" >"$work/whole.out" 2>&1
check 'grep -q "^received $work/whole/$pid-fuzz\$" "$work/whole.out" && "$pimg" verify "$work/whole/$pid-fuzz" >/dev/null' \
	"the stream as sent is received whole ($(stat -c %s "$work/stream") bytes)"

# Damaged copies of the stream, one per file, made by the stream's
# format (doc/STREAM.md) as an independent reader of it sees it.
python3 - "$work/stream" "$work/bad" "$n" <<'EOF'
import os, random, struct, sys
src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(src, "rb").read()
os.makedirs(out)
nl = struct.unpack_from("<I", data, 16)[0]
recs, at = [], 20 + nl
while at < len(data):
    t, pl, off, ln = struct.unpack_from("<IIQQ", data, at)
    recs.append((at, 24 + pl + ln))
    at += 24 + pl + ln
rnd = random.Random(45)
for i in range(n):
    b = bytearray(data)
    kind = i % 6
    if kind == 0:    # a byte of the head
        b[rnd.randrange(0, 20 + nl)] ^= 1 << rnd.randrange(8)
    elif kind == 1:  # a byte of a record's head
        s, _ = rnd.choice(recs)
        b[s + rnd.randrange(24)] ^= 1 << rnd.randrange(8)
    elif kind == 2:  # a byte anywhere
        for _ in range(rnd.randrange(1, 4)):
            b[rnd.randrange(len(b))] ^= 1 << rnd.randrange(8)
    elif kind == 3:  # cut
        b = b[: rnd.randrange(len(b))]
    elif kind == 4:  # a record dropped or repeated
        s, l = rnd.choice(recs)
        b = b[:s] + b[s + l:] if rnd.random() < 0.5 else b[:s] + b[s:s + l] + b[s:]
    else:            # two records swapped
        (s1, l1), (s2, l2) = sorted(rnd.sample(recs, 2))
        b = b[:s1] + b[s2:s2 + l2] + b[s1 + l1:s2] + b[s1:s1 + l1] + b[s2 + l2:]
    open(os.path.join(out, "%03d" % i), "wb").write(bytes(b))
EOF

before=$(ls -A "$work" | sort | tr '\n' ' ')
crashed=0 unanswered=0 kept=0
for f in "$work"/bad/*; do
	"$phos" receive --no-restore --dir "$work/r/$(basename "$f")" <"$f" >"$work/r.out" 2>/dev/null
	rc=$?
	[ "$rc" -gt 1 ] && crashed=$((crashed + 1)) && echo "# $(basename "$f"): exit $rc"
	grep -Eq '^(received |error: )' "$work/r.out" || unanswered=$((unanswered + 1))
	[ "$rc" = 0 ] && kept=$((kept + 1))
done
check '[ "$crashed" = 0 ]' "$n damaged streams: phos receive never crashed (exit 0 or 1 each; $kept received whole)"
check '[ "$unanswered" = 0 ]' "each got an answer on stdout: received, or error and why"
left=$(find "$work/r" -mindepth 2 -maxdepth 2 2>/dev/null | while read -r d; do
	case $(basename "$d") in .*) echo "$d" ;; *) "$pimg" verify "$d" >/dev/null 2>&1 || echo "$d" ;; esac
done)
check '[ -z "$left" ]' "nothing is left but whole images that verify${left:+: $left}"
after=$(ls -A "$work" | grep -vx -e r -e r.out | sort | tr '\n' ' ')
stray=$(find "$work/r" -mindepth 3 -maxdepth 3 ! -name criu ! -name "gpu.*" ! -name manifest.phos)
check '[ "$after" = "$before" ] && [ -z "$stray" ]' "nothing is written outside the folder each was given${stray:+: $stray}"
done_testing
