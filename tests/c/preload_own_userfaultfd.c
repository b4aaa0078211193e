/* A program pages part of its memory with a userfaultfd of its own, as
 * QEMU's postcopy migration and stress-ng's userfaultfd stressor do.
 * Meant to run under `tiermem run --dram 16M`.
 *
 * 1. A 48 MiB region is stamped, three times the budget, so most of it
 *    leaves DRAM.
 * 2. The program registers its middle 16 MiB with its own userfaultfd
 *    (missing faults). The registration succeeds, and every byte of the
 *    region reads its stamp after it: the registered part kept its bytes,
 *    evicted ones included, and the rest still pages.
 * 3. It discards the first 4 MiB of the registered part (MADV_DONTNEED) and
 *    reads it from the main thread while a thread of its own serves the
 *    faults: each page arrives by its UFFDIO_COPY, filled with a pattern of
 *    its own, and the thread counts one fault per page.
 * 4. It unregisters, unmaps the registered part and maps it again: fresh
 *    zeroed memory there, which it stamps and reads back, paging again.
 *
 * Prints "OK ..." and exits 0, or "FAIL ..." and exits 1. */
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

#define MIB (1024UL * 1024UL)
#define PAGE 4096UL
#define REGION (48 * MIB)
#define OWN_START (16 * MIB)
#define OWN_LEN (16 * MIB)
#define SERVED (4 * MIB)

static void fail(const char *what) {
    printf("FAIL %s (errno %d: %s)\n", what, errno, strerror(errno));
    fflush(stdout);
    exit(1);
}

static uint8_t stamp(size_t i, unsigned gen) {
    return (uint8_t)(i * 31 + (i >> 12) * 7 + gen * 101 + 1);
}

static uint8_t served_byte(size_t page, size_t i) { return (uint8_t)(page * 13 + i * 3 + 0x5a); }

static void fill(uint8_t *p, size_t from, size_t to, unsigned gen) {
    for (size_t i = from; i < to; i++) p[i] = stamp(i, gen);
}

static void expect(const uint8_t *p, size_t from, size_t to, unsigned gen, const char *what) {
    for (size_t i = from; i < to; i++) {
        if (p[i] != stamp(i, gen)) {
            printf("FAIL %s: byte %zu is %u, not %u\n", what, i, p[i], stamp(i, gen));
            exit(1);
        }
    }
}

struct server {
    int uffd;
    uint8_t *own;
    atomic_int stop;
    atomic_long served;
};

/* Serves every missing fault with a page of `served_byte`s. */
static void *serve(void *arg) {
    struct server *s = arg;
    static uint8_t page[PAGE] __attribute__((aligned(4096)));
    while (!atomic_load(&s->stop)) {
        struct pollfd pfd = {.fd = s->uffd, .events = POLLIN};
        if (poll(&pfd, 1, 50) <= 0) continue;
        struct uffd_msg msg;
        if (read(s->uffd, &msg, sizeof msg) != sizeof msg) continue;
        if (msg.event != UFFD_EVENT_PAGEFAULT) continue;
        uintptr_t at = msg.arg.pagefault.address & ~(PAGE - 1);
        size_t n = (at - (uintptr_t)s->own) / PAGE;
        for (size_t i = 0; i < PAGE; i++) page[i] = served_byte(n, i);
        struct uffdio_copy copy = {.dst = at, .src = (uintptr_t)page, .len = PAGE, .mode = 0};
        if (ioctl(s->uffd, UFFDIO_COPY, &copy) != 0 && errno != EEXIST) fail("UFFDIO_COPY");
        atomic_fetch_add(&s->served, 1);
    }
    return NULL;
}

int main(void) {
    uint8_t *r = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) fail("mmap");
    fill(r, 0, REGION, 1);

    int uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (uffd < 0) fail("userfaultfd");
    struct uffdio_api api = {.api = UFFD_API, .features = 0};
    if (ioctl(uffd, UFFDIO_API, &api) != 0) fail("UFFDIO_API");
    uint8_t *own = r + OWN_START;
    struct uffdio_register reg = {
        .range = {.start = (uintptr_t)own, .len = OWN_LEN},
        .mode = UFFDIO_REGISTER_MODE_MISSING,
    };
    if (ioctl(uffd, UFFDIO_REGISTER, &reg) != 0) fail("UFFDIO_REGISTER over the program's memory");
    expect(r, 0, REGION, 1, "the region after the registration");

    if (madvise(own, SERVED, MADV_DONTNEED) != 0) fail("MADV_DONTNEED of registered memory");
    struct server s = {.uffd = uffd, .own = own};
    pthread_t thread;
    if (pthread_create(&thread, NULL, serve, &s) != 0) fail("pthread_create");
    for (size_t page = 0; page < SERVED / PAGE; page++) {
        for (size_t i = 0; i < PAGE; i++) {
            uint8_t b = own[page * PAGE + i];
            if (b != served_byte(page, i)) {
                printf("FAIL the served page %zu: byte %zu is %u, not %u\n", page, i, b,
                       served_byte(page, i));
                return 1;
            }
        }
    }
    atomic_store(&s.stop, 1);
    pthread_join(thread, NULL);
    long served = atomic_load(&s.served);
    if (served != (long)(SERVED / PAGE)) {
        printf("FAIL the program's pager served %ld faults, not %lu\n", served, SERVED / PAGE);
        return 1;
    }
    expect(r, OWN_START + SERVED, REGION, 1, "the region after the program's own paging");
    expect(r, 0, OWN_START, 1, "the region's first part after the program's own paging");

    struct uffdio_range range = {.start = (uintptr_t)own, .len = OWN_LEN};
    if (ioctl(uffd, UFFDIO_UNREGISTER, &range) != 0) fail("UFFDIO_UNREGISTER");
    close(uffd);
    if (munmap(own, OWN_LEN) != 0) fail("munmap of the registered part");
    void *again = mmap(own, OWN_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                       -1, 0);
    if (again != own) fail("mmap MAP_FIXED where the registered part was");
    for (size_t i = 0; i < OWN_LEN; i++) {
        if (own[i] != 0) {
            printf("FAIL the part mapped again: byte %zu is %u, not 0\n", i, own[i]);
            return 1;
        }
    }
    fill(r, OWN_START, OWN_START + OWN_LEN, 2);
    fill(r, 0, OWN_START, 3);
    expect(r, OWN_START, OWN_START + OWN_LEN, 2, "the part mapped again");
    expect(r, 0, OWN_START, 3, "the region's first part, stamped again");
    printf("OK the program's own userfaultfd served %ld faults; every byte kept\n", served);
    return 0;
}
