/*
 * The drain a substituted memfd needs, in one atomic step: can the bytes of
 * a userfaultfd-registered private anonymous range move into a memfd while
 * other threads keep reading and writing the range, with no write lost?
 *
 * 1. mremap(MREMAP_MAYMOVE | MREMAP_DONTUNMAP) moves the range's page
 *    tables to a stash address at once; the old range stays mapped, empty
 *    and registered, so every access to it from then on is a userfaultfd
 *    fault, which this program's handler reads and leaves unanswered.
 * 2. The stash is written into the memfd with pwrite(2): nobody else can
 *    reach the stash, so it holds still.
 * 3. mmap(memfd, MAP_SHARED | MAP_FIXED) replaces the empty range, and one
 *    UFFDIO_WAKE over it lets every parked thread retry, into the file.
 *
 * Four threads stamp random pages of the range with their own counter all
 * along; each remembers the last value it wrote to each page, and after the
 * drain every byte of every page is checked through the descriptor against
 * those (every byte of a page holds the same value, so a page torn between
 * two writes shows). A page no thread wrote must read as the first fill.
 *
 * On Linux 6.18 (2026-11-29): OK, the faults parked during the drain are
 * counted, and no byte is lost. glibc's mremap() passes its unused fifth
 * argument to the kernel, which 6.18 checks even without MREMAP_FIXED: the
 * call fails with EINVAL unless made with syscall(SYS_mremap, ..., 0).
 *
 * Build and run: cc -O2 -pthread -o /tmp/memfd_drain docs/perf/memfd_drain.c && /tmp/memfd_drain
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif

#define PAGE 4096UL
#define PAGES 8192UL /* 32 MiB */
#define LEN (PAGES * PAGE)
#define WRITERS 4

static uint8_t *range;
static int uffd;
static atomic_int stop_writers;
/* Per writer and page, the last value written there (0: none). */
static uint8_t last[WRITERS][PAGES];

static void die(const char *what) {
    printf("FAIL %s: %s\n", what, strerror(errno));
    exit(1);
}

static uint8_t first_fill(unsigned long page) { return (uint8_t)(page * 7 + 1); }

static void *writer(void *arg) {
    unsigned id = (unsigned)(uintptr_t)arg;
    uint64_t x = 0x9e3779b97f4a7c15ULL * (id + 1);
    uint8_t value = (uint8_t)(id * 50 + 2);
    while (!atomic_load(&stop_writers)) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        unsigned long page = x % PAGES;
        /* Pages are split among writers, so each page has one writer. */
        page -= page % WRITERS;
        page += id;
        if (++value == 0) value = 1;
        memset(range + page * PAGE, value, PAGE);
        last[id][page] = value;
    }
    return NULL;
}

/* Reads faults and leaves them parked until the wake; counts them. */
static atomic_long parked;
static atomic_int stop_handler;
static void *handler(void *arg) {
    (void)arg;
    struct pollfd pfd = {.fd = uffd, .events = POLLIN};
    while (!atomic_load(&stop_handler)) {
        if (poll(&pfd, 1, 10) != 1) continue;
        struct uffd_msg msg;
        if (read(uffd, &msg, sizeof msg) == sizeof msg && msg.event == UFFD_EVENT_PAGEFAULT)
            atomic_fetch_add(&parked, 1);
    }
    return NULL;
}

int main(void) {
    uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (uffd < 0) die("userfaultfd");
    struct uffdio_api api = {.api = UFFD_API};
    if (ioctl(uffd, UFFDIO_API, &api)) die("UFFDIO_API");
    range = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (range == MAP_FAILED) die("mmap");
    struct uffdio_register reg = {.range = {(uintptr_t)range, LEN},
                                  .mode = UFFDIO_REGISTER_MODE_MISSING};
    if (ioctl(uffd, UFFDIO_REGISTER, &reg)) die("UFFDIO_REGISTER");
    static uint8_t page_buf[PAGE];
    for (unsigned long p = 0; p < PAGES; p++) {
        memset(page_buf, first_fill(p), PAGE);
        struct uffdio_copy copy = {.dst = (uintptr_t)range + p * PAGE,
                                   .src = (uintptr_t)page_buf, .len = PAGE};
        if (ioctl(uffd, UFFDIO_COPY, &copy)) die("UFFDIO_COPY");
    }
    int fd = memfd_create("guest-ram", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, LEN)) die("memfd");

    pthread_t writers[WRITERS], handler_thread;
    if (pthread_create(&handler_thread, NULL, handler, NULL)) die("pthread_create");
    for (unsigned i = 0; i < WRITERS; i++)
        if (pthread_create(&writers[i], NULL, writer, (void *)(uintptr_t)i)) die("pthread_create");
    usleep(100 * 1000);

    /* 1. The range empties at once; its pages wait in the stash. */
    uint8_t *stash = (uint8_t *)syscall(SYS_mremap, range, LEN, LEN,
                                        MREMAP_MAYMOVE | MREMAP_DONTUNMAP, 0);
    if (stash == MAP_FAILED) die("mremap(MREMAP_DONTUNMAP)");
    /* 2. The stash into the file. */
    for (size_t done = 0; done < LEN;) {
        ssize_t n = pwrite(fd, stash + done, LEN - done, (off_t)done);
        if (n <= 0) die("pwrite");
        done += (size_t)n;
    }
    /* 3. The file in place of the range, and the parked threads woken. */
    if (mmap(range, LEN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) != range)
        die("mmap(MAP_FIXED) of the memfd");
    struct uffdio_range all = {(uintptr_t)range, LEN};
    if (ioctl(uffd, UFFDIO_WAKE, &all)) die("UFFDIO_WAKE");
    munmap(stash, LEN);

    usleep(100 * 1000); /* the writers go on, into the file */
    atomic_store(&stop_writers, 1);
    for (unsigned i = 0; i < WRITERS; i++) pthread_join(writers[i], NULL);
    atomic_store(&stop_handler, 1);
    pthread_join(handler_thread, NULL);

    static uint8_t got[PAGE];
    unsigned long written = 0;
    for (unsigned long p = 0; p < PAGES; p++) {
        uint8_t want = first_fill(p);
        unsigned id = (unsigned)(p % WRITERS);
        if (last[id][p]) want = last[id][p], written++;
        if (pread(fd, got, PAGE, (off_t)(p * PAGE)) != (ssize_t)PAGE) die("pread");
        for (unsigned long b = 0; b < PAGE; b++)
            if (got[b] != want) {
                printf("FAIL page %lu byte %lu reads %u through the file, not %u\n", p, b, got[b], want);
                return 1;
            }
    }
    printf("OK %lu pages written by %d threads around the drain, %ld faults parked during it, "
           "every byte of %lu MiB right through the file\n",
           written, WRITERS, atomic_load(&parked), LEN >> 20);
    return 0;
}
