/* Asynchronous O_DIRECT reads (io_uring, io_uring with registered buffers,
 * AIO) into tiered buffers while other threads page heavily. Meant to run
 * under `tiermem run --dram 8M`.
 *
 * The kernel pins a buffer's pages while the device writes them by DMA,
 * and the read completes outside any call of the program's. Were tiermem
 * to evict such a page mid-read, the read's bytes would land in a page
 * nothing maps any more and the buffer would keep what it held before. So
 * every buffer is filled with 0xEE before each round of reads, NBUF reads
 * are in flight at once, and every byte is checked when they complete.
 *
 * The rings and contexts are made with raw system calls through glibc's
 * syscall(), as liburing and libaio make them.
 *
 * The file: DIR/async.dat (or PATH itself, when it names a file, such as a
 * slow disk nbdfuse exposes), FILE_MIB MiB, byte o = pattern(o). Buffers:
 * NBUF malloc'd (so tiered) buffers of READ_KIB KiB. Two threads write
 * random pages of a PAGER_MIB MiB region all along, so pages keep leaving
 * DRAM, the buffers' included.
 *
 * Usage: preload_async_io uring|uring-fixed|aio DIR|PATH [SECONDS]
 * Prints "OK mode=M reads=N bytes=B" and exits 0, or "FAIL ..." and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <linux/io_uring.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "direct_io_common.h"

#define READ_KIB 256
#define READ_BYTES ((size_t)READ_KIB << 10)
#define NBUF 4

/* ---- io_uring, by hand ---- */

struct ring {
    int fd;
    unsigned *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
};

static void ring_setup(struct ring *r) {
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    r->fd = (int)syscall(SYS_io_uring_setup, 8, &p);
    if (r->fd < 0) fail("io_uring_setup");
    size_t sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    uint8_t *sq = mmap(NULL, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
                       IORING_OFF_SQ_RING);
    uint8_t *cq = mmap(NULL, cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
                       IORING_OFF_CQ_RING);
    r->sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES);
    if (sq == MAP_FAILED || cq == MAP_FAILED || r->sqes == MAP_FAILED) fail("mapping the ring");
    r->sq_tail = (unsigned *)(sq + p.sq_off.tail);
    r->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    r->sq_array = (unsigned *)(sq + p.sq_off.array);
    r->cq_head = (unsigned *)(cq + p.cq_off.head);
    r->cq_tail = (unsigned *)(cq + p.cq_off.tail);
    r->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
    r->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
}

static void ring_register(struct ring *r, uint8_t **bufs) {
    struct iovec iov[NBUF];
    for (int b = 0; b < NBUF; b++) iov[b] = (struct iovec){bufs[b], READ_BYTES};
    if (syscall(SYS_io_uring_register, r->fd, IORING_REGISTER_BUFFERS, iov, NBUF) != 0)
        fail("registering the buffers");
}

static void ring_reads(struct ring *r, int fd, uint8_t **bufs, const size_t *offs, int fixed) {
    unsigned tail = *r->sq_tail;
    for (int b = 0; b < NBUF; b++) {
        unsigned i = (tail + b) & *r->sq_mask;
        struct io_uring_sqe *sqe = &r->sqes[i];
        memset(sqe, 0, sizeof *sqe);
        sqe->opcode = fixed ? IORING_OP_READ_FIXED : IORING_OP_READ;
        sqe->fd = fd;
        sqe->addr = (uint64_t)(uintptr_t)bufs[b];
        sqe->len = READ_BYTES;
        sqe->off = offs[b];
        sqe->buf_index = (uint16_t)b;
        sqe->user_data = (uint64_t)b;
        r->sq_array[i] = i;
    }
    atomic_store_explicit((_Atomic unsigned *)r->sq_tail, tail + NBUF, memory_order_release);
    if (syscall(SYS_io_uring_enter, r->fd, NBUF, NBUF, IORING_ENTER_GETEVENTS, NULL, 0) < 0)
        fail("io_uring_enter");
    int done = 0;
    while (done < NBUF) {
        unsigned head = *r->cq_head;
        unsigned ctail = atomic_load_explicit((_Atomic unsigned *)r->cq_tail, memory_order_acquire);
        if (head == ctail) {
            if (syscall(SYS_io_uring_enter, r->fd, 0, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0)
                fail("io_uring_enter (wait)");
            continue;
        }
        struct io_uring_cqe *cqe = &r->cqes[head & *r->cq_mask];
        if (cqe->res != (int)READ_BYTES) {
            errno = cqe->res < 0 ? -cqe->res : EIO;
            fail("an io_uring read");
        }
        atomic_store_explicit((_Atomic unsigned *)r->cq_head, head + 1, memory_order_release);
        done++;
    }
}

/* ---- Linux AIO, by hand ---- */

static void aio_reads(aio_context_t ctx, int fd, uint8_t **bufs, const size_t *offs) {
    struct iocb cbs[NBUF], *list[NBUF];
    for (int b = 0; b < NBUF; b++) {
        memset(&cbs[b], 0, sizeof cbs[b]);
        cbs[b].aio_lio_opcode = IOCB_CMD_PREAD;
        cbs[b].aio_fildes = (uint32_t)fd;
        cbs[b].aio_buf = (uint64_t)(uintptr_t)bufs[b];
        cbs[b].aio_nbytes = READ_BYTES;
        cbs[b].aio_offset = (int64_t)offs[b];
        list[b] = &cbs[b];
    }
    if (syscall(SYS_io_submit, ctx, NBUF, list) != NBUF) fail("io_submit");
    struct io_event events[NBUF];
    int done = 0;
    while (done < NBUF) {
        long n = syscall(SYS_io_getevents, ctx, 1, NBUF - done, events, NULL);
        if (n < 0) {
            if (errno == EINTR) continue;
            fail("io_getevents");
        }
        for (long e = 0; e < n; e++) {
            if (events[e].res != (int64_t)READ_BYTES) {
                errno = events[e].res < 0 ? (int)-events[e].res : EIO;
                fail("an AIO read");
            }
        }
        done += (int)n;
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        printf("FAIL usage: preload_async_io uring|uring-fixed|aio DIR|PATH [SECONDS]\n");
        return 1;
    }
    const char *mode = argv[1];
    int uring = strcmp(mode, "uring") == 0, fixed = strcmp(mode, "uring-fixed") == 0;
    int aio = strcmp(mode, "aio") == 0;
    if (!uring && !fixed && !aio) {
        printf("FAIL unknown mode %s\n", mode);
        return 1;
    }
    int seconds = argc > 3 ? atoi(argv[3]) : 8;
    char path[4096];
    struct stat st;
    int named_file = stat(argv[2], &st) == 0 && !S_ISDIR(st.st_mode);
    if (named_file)
        snprintf(path, sizeof path, "%s", argv[2]);
    else
        snprintf(path, sizeof path, "%s/async.dat", argv[2]);
    write_file(path);
    int fd = open(path, O_RDONLY | O_DIRECT);
    if (fd < 0) fail("opening the file O_DIRECT");

    uint8_t *bufs[NBUF];
    for (int b = 0; b < NBUF; b++)
        if (posix_memalign((void **)&bufs[b], PAGE, READ_BYTES) != 0) fail("posix_memalign");
    struct ring ring;
    memset(&ring, 0, sizeof ring);
    aio_context_t ctx = 0;
    if (uring || fixed) ring_setup(&ring);
    if (fixed) ring_register(&ring, bufs);
    if (aio && syscall(SYS_io_setup, NBUF, &ctx) != 0) fail("io_setup");

    uint8_t *region = malloc(PAGER_MIB * MIB);
    if (!region) fail("malloc");
    memset(region, 1, PAGER_MIB * MIB);
    pthread_t threads[2];
    for (int t = 0; t < 2; t++)
        if (pthread_create(&threads[t], NULL, pager, region + t) != 0) fail("pthread_create");

    time_t end = time(NULL) + seconds;
    uint64_t x = 88172645463325252ull;
    size_t rounds = 0, bytes = 0;
    size_t offs[NBUF];
    while (time(NULL) < end) {
        for (int b = 0; b < NBUF; b++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            offs[b] = (x % ((FILE_MIB * MIB - READ_BYTES) / PAGE)) * PAGE;
            memset(bufs[b], 0xEE, READ_BYTES);
        }
        if (aio)
            aio_reads(ctx, fd, bufs, offs);
        else
            ring_reads(&ring, fd, bufs, offs, fixed);
        for (int b = 0; b < NBUF; b++) {
            for (size_t i = 0; i < READ_BYTES; i++) {
                if (bufs[b][i] != pattern(offs[b] + i)) {
                    printf("FAIL %s round %zu, buffer %d at file offset %zu: byte %zu is %02x, "
                           "expected %02x\n",
                           mode, rounds, b, offs[b], i, bufs[b][i], pattern(offs[b] + i));
                    fflush(stdout);
                    _exit(1);
                }
            }
        }
        rounds++;
        bytes += NBUF * READ_BYTES;
    }
    atomic_store(&stop, 1);
    for (int t = 0; t < 2; t++) pthread_join(threads[t], NULL);
    close(fd);
    if (!named_file) unlink(path);
    printf("OK mode=%s reads=%zu bytes=%zu\n", mode, rounds * NBUF, bytes);
    return 0;
}
