# SPDX-License-Identifier: GPL-2.0-only
# bench/criu-tree's tree: this process and two children, each holding MIB
# MiB of its own pattern, checking it every 0.2 s (/tmp/ok-N, or /tmp/bad-N
# if it changed).
import os, sys, time, hashlib
def work(seed):
    import ctypes
    libc = ctypes.CDLL(None)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    if os.environ.get('RESV_GIB'):  # a PROT_NONE private reservation, as CUDA makes
        libc.mmap(None, int(os.environ['RESV_GIB']) << 30, 0, 0x22 | 0x4000, -1, 0)
    b = bytearray((seed * 7 + i) & 255 for i in range(256)) * (int(os.environ.get("MIB","200")) * 4096)
    h = hashlib.sha256(b).hexdigest()
    while True:
        time.sleep(0.2)
        if hashlib.sha256(b).hexdigest() != h:
            open("/tmp/bad-%d" % seed, "w").write("bad")
        open("/tmp/ok-%d" % seed, "w").write(str(time.time()))
kids = []
for s in (1, 2):
    p = os.fork()
    if p == 0:
        work(s)
    kids.append(p)
work(0)
