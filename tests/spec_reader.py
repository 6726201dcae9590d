#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only
"""An independent reader of phos checkpoint images, written from
image-format/FORMAT.md alone, to show that the specification suffices.

    spec_reader.py verify IMAGE          exit 0 if sound, 1 if not
    spec_reader.py cat IMAGE OBJECT OUT  write object OBJECT's bytes to OUT
    spec_reader.py stats IMAGE OUT       write the image's stats to OUT, a line
                                         "NAME VALUE" each, in the manifest's order

Needs python3-xxhash and python3-lz4.
"""
import os
import struct
import sys

import lz4.block
import xxhash


class Corrupt(Exception):
    pass


def checksum(data):
    h = xxhash.xxh3_128_intdigest(data)
    return struct.pack('<QQ', h & (2**64 - 1), h >> 64)


def need(cond, what):
    if not cond:
        raise Corrupt(what)


def read_file(path):
    need(os.path.isfile(path) and not os.path.islink(path), f'{path}: missing or not a regular file')
    with open(path, 'rb') as f:
        return f.read()


class Image:
    def __init__(self, path, depth=1, seen=()):
        self.path = path
        need(depth <= 64, 'parent chain longer than 64')
        self.parse_manifest(read_file(os.path.join(path, 'manifest.phos')))
        need(self.uuid not in seen, 'parent chain loops')
        self.parse_index(read_file(os.path.join(path, 'gpu.index')))
        # Since 1.3 the data may be split: gpu.data, gpu.data.1, ...
        self.data = [read_file(os.path.join(path, 'gpu.data' + (f'.{f}' if f else '')))
                     for f in range(len(self.file_sizes))]
        self.check_data()
        self.parent = None
        if self.parent_path is not None:
            base = os.path.dirname(os.path.normpath(path))
            pp = self.parent_path if self.parent_path.startswith('/') else os.path.join(base, self.parent_path)
            self.parent = Image(pp, depth + 1, seen + (self.uuid,))
            self.check_parent()

    # Manifest -----------------------------------------------------------
    def parse_manifest(self, m):
        need(len(m) >= 8 and m[0:4] == b'PHSM', 'manifest: bad magic')
        major, minor = struct.unpack_from('<HH', m, 4)
        if major != 1:
            raise Corrupt(f'manifest: unsupported version {major}.{minor}')
        need(len(m) >= 32 + 24, 'manifest: too short')
        need(m[8:12] == b'\x04\x03\x02\x01', 'manifest: byte order')
        header_size, file_size, nsec = struct.unpack_from('<IQI', m, 12)
        need(file_size == len(m), 'manifest: file_size')
        need(header_size >= 32 and header_size % 8 == 0 and header_size <= len(m) - 24, 'manifest: header_size')
        need(checksum(m[:-16]) == m[-16:], 'manifest: checksum')
        need(m[-24:-20] == b'PHSE', 'manifest: end magic')
        end = len(m) - 24
        at = header_size
        seen = set()
        self.parent_path = None
        self.criu = {}
        self.objects = []
        self.members = []
        self.extra_sizes = []
        self.stats = []
        for _ in range(nsec):
            need(end - at >= 16, 'manifest: section header')
            typ, flags, length = struct.unpack_from('<IIQ', m, at)
            need(length <= end - at - 16, 'manifest: section length')
            p = m[at + 16:at + 16 + length]
            pbase = at + 16
            if 1 <= typ <= 12:
                need(typ not in seen, 'manifest: section twice')
                seen.add(typ)
            if typ == 3:
                need(len(p) >= 56, 'checkpoint: short')
                self.uuid = p[0:16]
                proto, self.chunk = struct.unpack_from('<II', p, 16)
                algo, = struct.unpack_from('<I', p, 48)
                need(proto in (1, 2, 3), 'checkpoint: protocol')
                need(algo == 1, 'checkpoint: checksum algorithm')
                need(4096 <= self.chunk <= 2**30 and self.chunk & (self.chunk - 1) == 0, 'checkpoint: chunk size')
            elif typ == 4:
                need(len(p) >= 18, 'parent: short')
                self.parent_uuid = p[0:16]
                n, = struct.unpack_from('<H', p, 16)
                need(1 <= n <= 4095 and len(p) >= 18 + n and b'\0' not in p[18:18 + n], 'parent: path')
                self.parent_path = p[18:18 + n].decode()
            elif typ == 5:
                need(len(p) >= 8, 'objects: short')
                count, = struct.unpack_from('<I', p, 0)
                need(count <= 2**20 and 8 + 32 * count <= len(p), 'objects: count')
                for i in range(count):
                    oid, dev, va, size, flags = struct.unpack_from('<IIQQI', p, 8 + 32 * i)
                    need(oid == i and size >= 1 and va + size < 2**64, 'objects: record')
                    self.objects.append((dev, va, size))
            elif typ == 6:
                need(len(p) >= 32, 'index section: short')
                self.index_size, self.index_count = struct.unpack_from('<QQ', p, 0)
                self.index_sum = p[16:32]
            elif typ == 7:
                need(len(p) >= 16, 'data section: short')
                self.data_size, self.stored_bytes = struct.unpack_from('<QQ', p, 0)
            elif typ == 10:
                need(len(p) >= 8, 'stripes section: short')
                count, = struct.unpack_from('<I', p, 0)
                need(1 <= count <= 63 and len(p) >= 8 + 8 * count, 'stripes section: count')
                self.extra_sizes = list(struct.unpack_from(f'<{count}Q', p, 8))
            elif typ == 8:
                need(len(p) >= 8, 'criu: short')
                count, = struct.unpack_from('<I', p, 0)
                off, last = 8, None
                for _ in range(count):
                    need(off + 26 <= len(p), 'criu: record')
                    size, = struct.unpack_from('<Q', p, off)
                    sums = p[off + 8:off + 24]
                    n, = struct.unpack_from('<H', p, off + 24)
                    name = p[off + 26:off + 26 + n]
                    need(1 <= n <= 255 and len(name) == n and b'/' not in name and b'\0' not in name
                         and name not in (b'.', b'..'), 'criu: name')
                    need(last is None or name > last, 'criu: order')
                    last = name
                    self.criu[name.decode()] = (size, sums)
                    off = (pbase + off + 26 + n + 7) // 8 * 8 - pbase
            elif typ == 9:
                need(len(p) >= 8, 'members: short')
                count, = struct.unpack_from('<I', p, 0)
                need(1 <= count <= 4096 and 8 + 40 * count <= len(p), 'members: count')
                for i in range(count):
                    pid, ppid, mflags, first, n = struct.unpack_from('<iiIII', p, 8 + 40 * i)
                    need(pid > 0 and pid not in [m[0] for m in self.members], 'members: pid')
                    self.members.append((pid, ppid, mflags, first, n))
            elif typ == 12:
                self.parse_stats(p, pbase)
            elif typ in (1, 2):
                pass  # process and devices: not needed to read GPU memory
            else:
                need(not flags & 1, f'manifest: unknown critical section {typ}')
            at = (at + 16 + length + 7) // 8 * 8
            need(at <= end, 'manifest: padding')
        need(at == end, 'manifest: bytes after the last section')
        need({3, 5, 6, 7} <= seen, 'manifest: required section missing')
        self.file_sizes = [self.data_size] + self.extra_sizes
        # Members own consecutive runs of objects that cover them all once.
        owned = [0] * len(self.objects)
        for _, _, _, first, n in self.members:
            need(first + n <= len(self.objects), 'members: objects out of range')
            for k in range(first, first + n):
                owned[k] += 1
        need(not self.members or all(c == 1 for c in owned), 'members: objects owned twice or not at all')

    def parse_stats(self, p, pbase):
        need(len(p) >= 8, 'stats: short')
        count, = struct.unpack_from('<I', p, 0)
        need(count <= 1024 and 8 + 16 * count <= len(p), 'stats: count')
        first = b'abcdefghijklmnopqrstuvwxyz'
        allowed = first + b'0123456789_.-'
        off, last = 8, None
        for _ in range(count):
            need(off + 10 <= len(p), 'stats: record')
            value, n = struct.unpack_from('<QH', p, off)
            name = p[off + 10:off + 10 + n]
            need(1 <= n <= 64 and len(name) == n, 'stats: name length')
            need(name[0] in first and all(c in allowed for c in name), 'stats: name')
            need(last is None or name > last, 'stats: order')
            last = name
            self.stats.append((name.decode(), value))
            off = (pbase + off + 10 + n + 7) // 8 * 8 - pbase

    # Index ---------------------------------------------------------------
    def parse_index(self, x):
        need(len(x) == self.index_size, 'index: size')
        need(len(x) >= 48 and x[0:4] == b'PHIX', 'index: magic')
        need(checksum(x) == self.index_sum, 'index: checksum in manifest')
        major, = struct.unpack_from('<H', x, 4)
        if major != 1:
            raise Corrupt('index: unsupported version')
        hsize, esize, count, chunk = struct.unpack_from('<IIQI', x, 8)
        need(hsize >= 32 and esize >= 48 and count == self.index_count and chunk == self.chunk, 'index: header')
        need(hsize + count * esize + 16 == len(x), 'index: file size')
        need(checksum(x[:-16]) == x[-16:], 'index: checksum')
        self.entries = []
        self.first = []
        k = 0
        for o, (_, _, size) in enumerate(self.objects):
            self.first.append(k)
            n = -(-size // self.chunk)
            need(k + n <= count, 'index: too few entries')
            for c in range(n):
                obj, flags, num, loc, stored, raw = struct.unpack_from('<IIQQII', x, hsize + k * esize)
                h = x[hsize + k * esize + 32:hsize + k * esize + 48]
                want = self.chunk if c + 1 < n else size - c * self.chunk
                stripe, flags = flags >> 8, flags & 0xff  # bits 8-15: the data file
                need(obj == o and num == c and raw == want and flags & ~3 == 0 and flags != 3, 'index: entry')
                need(stripe < len(self.file_sizes) and not (flags & 2 and stripe), 'index: data file')
                if flags & 2:
                    need(self.parent_path is not None and stored == 0, 'index: parent entry')
                elif flags & 1:
                    need(1 <= stored <= raw + raw // 255 + 16, 'index: lz4 length')
                else:
                    need(stored == raw, 'index: raw length')
                self.entries.append((flags, (stripe, loc), stored, raw, h))
                k += 1
        need(k == count, 'index: too many entries')

    # Data ---------------------------------------------------------------
    def check_data(self):
        total = 0
        for f, d in enumerate(self.data):
            need(len(d) == self.file_sizes[f], 'data: size')
            need(len(d) >= 4096 and d[0:4] == b'PHDA', 'data: magic')
            need(struct.unpack_from('<H', d, 4)[0] == 1, 'data: version')
            need(d[8:24] == self.uuid and struct.unpack_from('<I', d, 24)[0] == self.chunk, 'data: header')
            need(d[28:4096] == bytes(4068), 'data: header padding')
            own = sorted((loc, stored) for flags, (s, loc), stored, _, _ in self.entries if not flags & 2 and s == f)
            at = 4096
            for loc, stored in own:
                need(loc == at, 'data: chunks do not tile')
                at += (stored + 4095) // 4096 * 4096
            need(at == len(d), 'data: end')
            total += sum(s for _, s in own)
        need(total == self.stored_bytes, 'data: stored bytes')

    def check_parent(self):
        p = self.parent
        need(p.uuid == self.parent_uuid, 'parent: another image')
        need(p.chunk == self.chunk, 'parent: chunk size')
        for o, first in enumerate(self.first):
            n = -(-self.objects[o][2] // self.chunk)
            for c in range(n):
                flags, (_, loc), _, raw, h = self.entries[first + c]
                if flags & 2:
                    need(loc < len(p.objects), 'parent: object')
                    pn = -(-p.objects[loc][2] // p.chunk)
                    need(c < pn, 'parent: chunk')
                    _, _, _, praw, ph = p.entries[p.first[loc] + c]
                    need(praw == raw and ph == h, 'parent: chunk differs')

    def chunk_bytes(self, o, c):
        flags, (f, loc), stored, raw, h = self.entries[self.first[o] + c]
        if flags & 2:
            return self.parent.chunk_bytes(loc, c)
        padded = (stored + 4095) // 4096 * 4096
        d = self.data[f]
        need(d[loc + stored:loc + padded] == bytes(padded - stored), 'data: padding')
        b = d[loc:loc + stored]
        if flags & 1:
            try:
                b = lz4.block.decompress(b, uncompressed_size=raw)
            except Exception:
                raise Corrupt('data: lz4')
            need(len(b) == raw, 'data: lz4 length')
        need(checksum(b) == h, f'data: checksum of chunk {c} of object {o}')
        return b

    def object_bytes(self, o):
        n = -(-self.objects[o][2] // self.chunk)
        return b''.join(self.chunk_bytes(o, c) for c in range(n))

    def verify(self):
        img = self
        while img:
            for o in range(len(img.objects)):
                n = -(-img.objects[o][2] // img.chunk)
                for c in range(n):
                    if not img.entries[img.first[o] + c][0] & 2:
                        img.chunk_bytes(o, c)
            cdir = os.path.join(img.path, 'criu')
            names = set(os.listdir(cdir)) if os.path.isdir(cdir) else set()
            need(names == set(img.criu), 'criu: files differ from the manifest')
            for name, (size, sums) in img.criu.items():
                data = read_file(os.path.join(cdir, name))
                need(len(data) == size and checksum(data) == sums, f'criu: {name}')
            img = img.parent


def main():
    try:
        if len(sys.argv) == 3 and sys.argv[1] == 'verify':
            Image(sys.argv[2]).verify()
            print('sound')
            return 0
        if len(sys.argv) == 4 and sys.argv[1] == 'stats':
            img = Image(sys.argv[2])
            with open(sys.argv[3], 'w') as f:
                f.writelines(f'{name} {value}\n' for name, value in img.stats)
            return 0
        if len(sys.argv) == 5 and sys.argv[1] == 'cat':
            img = Image(sys.argv[2])
            with open(sys.argv[4], 'wb') as f:
                f.write(img.object_bytes(int(sys.argv[3])))
            return 0
    except (Corrupt, struct.error, OSError, UnicodeDecodeError) as e:
        print(f'corrupt: {e}', file=sys.stderr)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == '__main__':
    sys.exit(main())
