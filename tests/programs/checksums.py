"""Deterministic checksums over large Python data, computed twice.

Usage: python3 checksums.py SIZE_MIB

Builds a bytearray of SIZE_MIB MiB, a list of ints and strings of about the
same total size, and (if numpy imports) a numpy array of SIZE_MIB MiB. Each is
checksummed twice; the second pass comes after the other data has been
walked (8x the budget), so under `tiermem run` with a small DRAM budget the first copy has
been evicted and is read back from the backing store. The two passes must
agree. Prints the checksums (identical with and without tiermem) and a final
"OK" line; on a mismatch prints "FAIL ..." and exits 1.
"""

import hashlib
import sys

MIB = 1 << 20
MASK64 = (1 << 64) - 1


def fail(what):
    print("FAIL " + what, flush=True)
    sys.exit(1)


def build_bytearray(mib):
    # One MiB of hash output in counter mode; chunk k is that block rotated
    # by k * 4099 bytes with k written into its first 8 bytes.
    block = b"".join(hashlib.sha256(i.to_bytes(4, "little")).digest() for i in range(MIB // 32))
    ba = bytearray(mib * MIB)
    for k in range(mib):
        r = (k * 4099) % MIB
        chunk = block[r:] + block[:r]
        ba[k * MIB : (k + 1) * MIB] = chunk
        ba[k * MIB : k * MIB + 8] = k.to_bytes(8, "little")
    return ba


def build_list(mib):
    # Ints and short strings alternate; about 70 bytes per element including
    # the list's pointer.
    n = mib * MIB // 70
    out = []
    for i in range(n):
        x = (i * 0x9E3779B97F4A7C15) & MASK64
        if i % 2 == 0:
            out.append(x)
        else:
            out.append("s%d:%016x" % (i, x ^ (x >> 29)))
    return out


def sum_bytearray(ba):
    return hashlib.sha256(ba).hexdigest()


def sum_list(lst):
    total = 0
    folded = 0
    for v in lst:
        if type(v) is int:
            total += v
            folded ^= v
    # The strings, each followed by a newline, hashed a slice at a time (no
    # list-sized temporary).
    h = hashlib.sha256()
    step = 1 << 14
    for s in range(0, len(lst), step):
        strs = [v for v in lst[s : s + step] if type(v) is str]
        h.update(("\n".join(strs) + "\n").encode())
    return "%d items, int sum %016x, int xor %016x, str sha256 %s" % (
        len(lst),
        total & MASK64,
        folded,
        h.hexdigest(),
    )


def build_numpy(np, mib):
    arr = np.arange(mib * MIB // 8, dtype=np.uint64)
    arr *= np.uint64(0x9E3779B97F4A7C15)
    step = 1 << 17  # 1 MiB at a time: no array-sized temporary
    for s in range(0, arr.size, step):
        part = arr[s : s + step]
        part ^= part >> np.uint64(29)
    return arr


def sum_numpy(np, arr):
    total = int(arr.sum(dtype=np.uint64))
    # The same digest as sha256(arr.tobytes()), without a 4x-budget copy.
    digest = hashlib.sha256(memoryview(arr).cast("B")).hexdigest()
    return "%d elements, sum %016x, sha256 %s" % (arr.size, total, digest)


def main():
    if len(sys.argv) != 2:
        fail("usage: checksums.py SIZE_MIB")
    mib = int(sys.argv[1])
    if mib < 1:
        fail("SIZE_MIB must be at least 1")

    try:
        import numpy as np
    except ImportError:
        np = None

    ba = build_bytearray(mib)
    lst = build_list(mib)
    arr = build_numpy(np, mib) if np is not None else None

    first = [sum_bytearray(ba), sum_list(lst)]
    if arr is not None:
        first.append(sum_numpy(np, arr))

    # The first pass walked the bytearray, then the list, then the array:
    # by the time each is summed again, the other two (8x the budget) have
    # been walked since, so it comes back from the backing store.
    second = [sum_bytearray(ba), sum_list(lst)]
    if arr is not None:
        second.append(sum_numpy(np, arr))

    names = ["bytearray", "list", "numpy"]
    for name, a, b in zip(names, first, second):
        if a != b:
            fail("%s checksum changed between passes: %s then %s" % (name, a, b))
    print("size: %d MiB" % mib)
    print("bytearray: %d bytes, sha256 %s" % (len(ba), first[0]))
    print("list: " + first[1])
    if arr is not None:
        print("numpy: " + first[2])
    else:
        print("numpy: absent")
    print("OK checksums agree across two passes", flush=True)


if __name__ == "__main__":
    main()
