#!/usr/bin/env python3
"""How a disk's throughput depends on the memory behind a request, not only its size.

    segments.py [FILE]     (default: /var/lib/warmstart/device-probe, the device probe's file)

Reads FILE with O_DIRECT, 256 KiB and 1 MiB at a time, from 1, 4 and 8 threads, into (a) a
transparent-huge-page buffer (one memory segment per request) and (b) a buffer whose 4 KiB
pages were touched in a shuffled order (one segment per page, as the order-0 folios of
`readahead(2)`). A virtio disk without indirect descriptors takes one ring slot per segment,
so (b) is capped by the ring, whatever the depth. Drops the page cache before each pass.
"""
import mmap, os, random, sys, threading, time

path = sys.argv[1] if len(sys.argv) > 1 else "/var/lib/warmstart/device-probe"
size = os.path.getsize(path)


def buffer(huge):
    m = mmap.mmap(-1, 4 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if huge:
        m.madvise(mmap.MADV_HUGEPAGE)
        m.write(b"\1" * (4 << 20))
    else:
        m.madvise(mmap.MADV_NOHUGEPAGE)
        pages = list(range(0, 4 << 20, 4096))
        random.shuffle(pages)
        for p in pages:
            m[p] = 1
    return m


def run(huge, threads, bs):
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    bufs = [buffer(huge) for _ in range(threads)]
    n, lock, nxt = size // bs, threading.Lock(), [0]

    def worker(i):
        view = memoryview(bufs[i])[:bs]
        while True:
            with lock:
                k = nxt[0]
                nxt[0] += 1
            if k >= n:
                return
            os.preadv(fd, [view], k * bs)

    t = time.monotonic()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for x in ts:
        x.start()
    for x in ts:
        x.join()
    dt = time.monotonic() - t
    os.close(fd)
    return size / dt / 2**20


for bs in (256 << 10, 1 << 20):
    for threads in (1, 4, 8):
        print(f"{bs >> 10:5d} KiB, {threads} threads: huge pages {run(True, threads, bs):6.0f} MiB/s,"
              f" scattered 4 KiB pages {run(False, threads, bs):6.0f} MiB/s")
