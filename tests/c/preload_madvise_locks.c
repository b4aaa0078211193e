/* madvise(2) and mlock(2) on tiered memory behave as the kernel's do, and a
 * kernel lock tiermem never saw does not stop it paging. Meant to run under
 * `tiermem run --dram 16M`.
 *
 * 1. A 64 KiB piece of a 64 MiB region is locked by the mlock system call
 *    made with the syscall instruction, as Go's runtime makes its calls, so
 *    no interposer sees it: the kernel holds the lock, tiermem does not.
 *    The whole region is stamped and checked, every byte, twice, while it
 *    pages through the budget; the locked piece is evicted like the rest.
 *    Then the region is freed, the piece still locked.
 * 2. A page locked with mlock(): MADV_DONTNEED and MADV_FREE fail with
 *    EINVAL and the page keeps its bytes; MADV_DONTNEED_LOCKED discards it
 *    (zeros) and it stays locked (MADV_DONTNEED still fails); after
 *    munlock, MADV_DONTNEED works. MADV_REMOVE fails with EINVAL on private
 *    memory, which keeps its bytes.
 * 3. Two threads race on the pages of a 4 MiB buffer for two seconds, one
 *    locking and unlocking, the other discarding with MADV_DONTNEED and
 *    stamping again, while a third pages a 48 MiB region through the
 *    budget. Every page of the buffer reads its stamp or zeros; every byte
 *    of the region its stamp.
 *
 * Prints "OK ..." and exits 0, or "FAIL ..." and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24
#endif

#define MIB (1024UL * 1024UL)
#define PAGE 4096UL

static void fail(const char *what) {
    printf("FAIL %s (errno %d: %s)\n", what, errno, strerror(errno));
    exit(1);
}

/* A system call by the syscall instruction: no libc wrapper, no interposer. */
static long raw2(long nr, long a, long b) {
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b) : "rcx", "r11", "memory");
    return ret;
}

static uint8_t stamp(size_t i, unsigned gen) {
    return (uint8_t)(i * 31 + (i >> 12) * 7 + gen * 101 + 1);
}

static void fill(uint8_t *p, size_t len, unsigned gen) {
    for (size_t i = 0; i < len; i++) p[i] = stamp(i, gen);
}

static size_t first_wrong(const uint8_t *p, size_t len, unsigned gen) {
    for (size_t i = 0; i < len; i++)
        if (p[i] != stamp(i, gen)) return i;
    return len;
}

static int all_zero(const uint8_t *p, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (p[i]) return 0;
    return 1;
}

static void locked_behind_tiermems_back(void) {
    size_t len = 64 * MIB, piece = 64 * 1024, at = 8 * MIB;
    uint8_t *r = malloc(len);
    if (!r) fail("malloc");
    fill(r, len, 1);
    if (raw2(149 /* mlock */, (long)(r + at), (long)piece) != 0) fail("raw mlock");
    for (int pass = 0; pass < 2; pass++) {
        size_t bad = first_wrong(r, len, 1);
        if (bad != len) {
            printf("FAIL raw lock: byte %zu reads %u, not %u (pass %d)\n", bad, r[bad],
                   stamp(bad, 1), pass);
            exit(1);
        }
    }
    /* Freed while the kernel still holds the lock. */
    free(r);
}

static void expect_einval(int rc, const char *what) {
    if (rc == 0 || errno != EINVAL) {
        printf("FAIL %s: returned %d (errno %d), not EINVAL\n", what, rc, errno);
        exit(1);
    }
}

static void advice_on_locked_pages(void) {
    size_t len = 8 * MIB;
    uint8_t *r = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) fail("mmap");
    uint8_t *page = r + 4 * MIB;
    fill(r, len, 2);
    if (mlock(page, PAGE) != 0) fail("mlock");
    expect_einval(madvise(page, PAGE, MADV_DONTNEED), "MADV_DONTNEED of a locked page");
    expect_einval(madvise(page, PAGE, MADV_FREE), "MADV_FREE of a locked page");
    if (first_wrong(r, len, 2) != len) fail("a refused discard changed bytes");
    if (madvise(page, PAGE, MADV_DONTNEED_LOCKED) != 0) fail("MADV_DONTNEED_LOCKED");
    if (!all_zero(page, PAGE)) fail("a page did not read zeros after MADV_DONTNEED_LOCKED");
    expect_einval(madvise(page, PAGE, MADV_DONTNEED), "MADV_DONTNEED after MADV_DONTNEED_LOCKED");
    if (munlock(page, PAGE) != 0) fail("munlock");
    memset(page, 0x5a, PAGE);
    if (madvise(page, PAGE, MADV_DONTNEED) != 0) fail("MADV_DONTNEED after munlock");
    if (!all_zero(page, PAGE)) fail("a page did not read zeros after MADV_DONTNEED");
    expect_einval(madvise(r, PAGE, MADV_REMOVE), "MADV_REMOVE of private memory");
    if (first_wrong(r, PAGE, 2) != PAGE) fail("a refused MADV_REMOVE changed bytes");
    munmap(r, len);
}

#define RACE_PAGES 1024
static uint8_t *race_buf;
static atomic_int racing = 1;

static void *locker(void *arg) {
    (void)arg;
    unsigned seed = 7;
    while (atomic_load(&racing)) {
        uint8_t *p = race_buf + (rand_r(&seed) % RACE_PAGES) * PAGE;
        if (mlock(p, PAGE) == 0) munlock(p, PAGE);
    }
    return NULL;
}

static void *discarder(void *arg) {
    (void)arg;
    unsigned seed = 11;
    while (atomic_load(&racing)) {
        size_t n = rand_r(&seed) % RACE_PAGES;
        uint8_t *p = race_buf + n * PAGE;
        madvise(p, PAGE, MADV_DONTNEED);
        memset(p, (int)(n % 251) + 1, PAGE);
    }
    return NULL;
}

static void race_locks_with_discards(void) {
    size_t len = 48 * MIB;
    race_buf = malloc(RACE_PAGES * PAGE + PAGE);
    uint8_t *r = malloc(len);
    if (!race_buf || !r) fail("malloc");
    race_buf = (uint8_t *)(((uintptr_t)race_buf + PAGE - 1) & ~(PAGE - 1));
    for (size_t n = 0; n < RACE_PAGES; n++) memset(race_buf + n * PAGE, (int)(n % 251) + 1, PAGE);
    fill(r, len, 3);
    pthread_t a, b;
    if (pthread_create(&a, NULL, locker, NULL) || pthread_create(&b, NULL, discarder, NULL))
        fail("pthread_create");
    time_t end = time(NULL) + 2;
    unsigned passes = 0;
    while (time(NULL) < end || passes < 2) {
        size_t bad = first_wrong(r, len, 3);
        if (bad != len) {
            printf("FAIL race: byte %zu of the region reads %u, not %u\n", bad, r[bad], stamp(bad, 3));
            exit(1);
        }
        passes++;
    }
    atomic_store(&racing, 0);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    for (size_t n = 0; n < RACE_PAGES; n++) {
        uint8_t *p = race_buf + n * PAGE, want = (uint8_t)(n % 251) + 1;
        for (size_t i = 0; i < PAGE; i++)
            if (p[i] != want && !all_zero(p, PAGE)) {
                printf("FAIL race: page %zu byte %zu reads %u, neither %u nor zeros\n", n, i, p[i],
                       want);
                exit(1);
            }
    }
    printf("OK raw lock paged and discarded; advice on locked pages as the kernel's; "
           "%u passes of the region while locks raced discards\n",
           passes);
}

int main(void) {
    locked_behind_tiermems_back();
    advice_on_locked_pages();
    race_locks_with_discards();
    return 0;
}
