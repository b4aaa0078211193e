/* mremap, madvise, munmap, mincore and mprotect on a large anonymous private mapping
 * (above the interposer's threshold, so it is tiered), mostly evicted between
 * steps. Meant to run under `tiermem run --dram 1M`.
 *
 * Every 4 KiB page holds words that encode (generation, logical page, word);
 * the logical page number follows the data when the mapping moves, and
 * generation 0 means "must read as zeros".
 *
 * Prints "OK ..." as its last line and exits 0, or "FAIL ..." and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE 4096
#define WORDS (PAGE / 8)
#define MIB ((size_t)1 << 20)
#define PAGES(bytes) ((bytes) / PAGE)

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef MADV_FREE
#define MADV_FREE 8
#endif

static const char *step = "start";
static unsigned gens[PAGES(24 * MIB)]; /* expected generation of each logical page */

static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s: ", step);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    exit(1);
}

static inline uint64_t word(unsigned gen, size_t page, size_t k) {
    if (gen == 0) return 0;
    return ((uint64_t)gen << 56) | ((uint64_t)page << 12) | (uint64_t)k;
}

static void stamp(unsigned char *base, size_t first, size_t n, unsigned gen) {
    for (size_t p = first; p < first + n; p++) {
        uint64_t *w = (uint64_t *)(void *)(base + p * PAGE);
        for (size_t k = 0; k < WORDS; k++) w[k] = word(gen, p, k);
        gens[p] = gen;
    }
}

/* 1 if page p holds generation gen exactly. */
static int page_is(const unsigned char *base, size_t p, unsigned gen) {
    const uint64_t *w = (const uint64_t *)(const void *)(base + p * PAGE);
    for (size_t k = 0; k < WORDS; k++)
        if (w[k] != word(gen, p, k)) return 0;
    return 1;
}

static void verify(const unsigned char *base, size_t first, size_t n) {
    for (size_t p = first; p < first + n; p++) {
        if (page_is(base, p, gens[p])) continue;
        const uint64_t *w = (const uint64_t *)(const void *)(base + p * PAGE);
        for (size_t k = 0; k < WORDS; k++)
            if (w[k] != word(gens[p], p, k))
                fail("page %zu word %zu is %016llx (gen %u page %u), expected gen %u", p, k, (unsigned long long)w[k],
                     (unsigned)(w[k] >> 56), (unsigned)((w[k] >> 12) & 0xfffffffffull), gens[p]);
    }
}

static void expect_zero(size_t first, size_t n) {
    for (size_t p = first; p < first + n; p++) gens[p] = 0;
}

int main(void) {
    size_t len = 8 * MIB;

    /* Fresh mapping: zeros; then stamp it (most of it is evicted by the end). */
    step = "mmap 8 MiB";
    unsigned char *a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) fail("mmap: %s", strerror(errno));
    expect_zero(0, PAGES(len));
    verify(a, 0, PAGES(len));
    stamp(a, 0, PAGES(len), 1);
    verify(a, 0, PAGES(len));

    /* Grow to 24 MiB (moving if it must): old contents kept, new tail zero. */
    step = "mremap grow 8 -> 24 MiB";
    unsigned char *b = mremap(a, len, 24 * MIB, MREMAP_MAYMOVE);
    if (b == MAP_FAILED) fail("%s", strerror(errno));
    len = 24 * MIB;
    expect_zero(PAGES(8 * MIB), PAGES(16 * MIB));
    verify(b, 0, PAGES(len));
    stamp(b, PAGES(8 * MIB), PAGES(16 * MIB), 2);
    verify(b, 0, PAGES(len));

    /* Shrink in place to 16 MiB. */
    step = "mremap shrink 24 -> 16 MiB";
    unsigned char *c = mremap(b, len, 16 * MIB, 0);
    if (c == MAP_FAILED) fail("%s", strerror(errno));
    if (c != b) fail("a shrink moved the mapping from %p to %p", (void *)b, (void *)c);
    len = 16 * MIB;
    verify(c, 0, PAGES(len));

    /* Grow again to 20 MiB: the tail must be zero, not the data that was
     * there before the shrink. */
    step = "mremap regrow 16 -> 20 MiB";
    unsigned char *d = mremap(c, len, 20 * MIB, 0);
    int moved_on_regrow = 0;
    if (d == MAP_FAILED) {
        if (errno != ENOMEM) fail("in place: %s", strerror(errno));
        d = mremap(c, len, 20 * MIB, MREMAP_MAYMOVE);
        if (d == MAP_FAILED) fail("moving: %s", strerror(errno));
        moved_on_regrow = 1;
    }
    len = 20 * MIB;
    expect_zero(PAGES(16 * MIB), PAGES(4 * MIB));
    verify(d, 0, PAGES(len));
    stamp(d, PAGES(16 * MIB), PAGES(4 * MIB), 3);

    /* Move onto a reserved range with MREMAP_FIXED. */
    step = "mremap move (MREMAP_FIXED)";
    unsigned char *target = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (target == MAP_FAILED) fail("reserving the target: %s", strerror(errno));
    unsigned char *e = mremap(d, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, target);
    if (e == MAP_FAILED) fail("%s", strerror(errno));
    if (e != target) fail("moved to %p, not to %p", (void *)e, (void *)target);
    verify(e, 0, PAGES(len));
    stamp(e, 0, 64, 4); /* the moved mapping takes writes */
    verify(e, 0, PAGES(len));

    /* MADV_DONTNEED: the range reads back as zeros, the rest is intact, and
     * the range can be used again. */
    step = "madvise(MADV_DONTNEED)";
    if (madvise(e + 100 * PAGE, 200 * PAGE, MADV_DONTNEED) != 0) fail("%s", strerror(errno));
    expect_zero(100, 200);
    verify(e, 0, PAGES(len));
    stamp(e, 100, 200, 5);
    verify(e, 0, PAGES(len));

    /* MADV_FREE: each page reads back whole, either as it was or as zeros;
     * a page written afterwards keeps the new data (half of the range is
     * written without being read first). */
    step = "madvise(MADV_FREE)";
    int have_free = 1;
    if (madvise(e + 1000 * PAGE, 400 * PAGE, MADV_FREE) != 0) {
        if (errno != EINVAL) fail("%s", strerror(errno));
        have_free = 0; /* a kernel before 4.5 */
    }
    if (have_free) {
        for (size_t p = 1000; p < 1200; p++) {
            if (page_is(e, p, gens[p])) continue;
            if (page_is(e, p, 0)) {
                gens[p] = 0;
                continue;
            }
            fail("page %zu after MADV_FREE is neither its old contents nor zeros", p);
        }
    }
    /* Lazily freed pages may still turn into zeros at any time until they
     * are written: write them all (whole pages) before relying on them. */
    stamp(e, 1000, 400, 6);
    verify(e, 0, PAGES(len));

    /* munmap a middle part, map it again: zeros there, neighbours intact. */
    step = "munmap a middle part and mmap it again";
    unsigned char *hole = e + 2000 * PAGE;
    if (munmap(hole, MIB) != 0) fail("munmap: %s", strerror(errno));
    verify(e, 0, 2000);
    verify(e, 2000 + PAGES(MIB), PAGES(len) - 2000 - PAGES(MIB));
    unsigned char *again =
        mmap(hole, MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (again == MAP_FAILED) fail("mmap into the hole: %s", strerror(errno));
    if (again != hole) fail("mmap with MAP_FIXED_NOREPLACE returned %p, not the hole %p", (void *)again, (void *)hole);
    expect_zero(2000, PAGES(MIB));
    verify(e, 0, PAGES(len));
    stamp(e, 2000, PAGES(MIB), 7);
    verify(e, 0, PAGES(len));

    /* mprotect: read-only pages read correctly (also after eviction), then
     * writable again; PROT_NONE and back keeps the contents. */
    step = "mprotect";
    if (mprotect(e + 3000 * PAGE, 500 * PAGE, PROT_READ) != 0) fail("PROT_READ: %s", strerror(errno));
    verify(e, 0, PAGES(len));
    verify(e, 3000, 500);
    if (mprotect(e + 3000 * PAGE, 500 * PAGE, PROT_READ | PROT_WRITE) != 0) fail("back to RW: %s", strerror(errno));
    stamp(e, 3000, 500, 8);
    if (mprotect(e + 3600 * PAGE, 100 * PAGE, PROT_NONE) != 0) fail("PROT_NONE: %s", strerror(errno));
    verify(e, 0, 3600);
    verify(e, 3700, PAGES(len) - 3700);
    if (mprotect(e + 3600 * PAGE, 100 * PAGE, PROT_READ | PROT_WRITE) != 0) fail("back to RW: %s", strerror(errno));
    verify(e, 0, PAGES(len));

    /* A final full pass, then unmap. */
    step = "final check";
    verify(e, 0, PAGES(len));
    if (munmap(e, len) != 0) fail("munmap: %s", strerror(errno));
    /* Unmapped memory is unmapped to mincore too. */
    unsigned char residency[4];
    if (mincore(e, 4 * PAGE, residency) == 0 || errno != ENOMEM)
        fail("mincore of unmapped memory: not ENOMEM (%s)", strerror(errno));

    /* Below the threshold, and a length that is not a page multiple. */
    step = "small and odd-sized mappings";
    unsigned char *small = mmap(NULL, 64 * 1024, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (small == MAP_FAILED) fail("mmap 64 KiB: %s", strerror(errno));
    memset(small, 0x11, 64 * 1024);
    for (size_t j = 0; j < 64 * 1024; j++)
        if (small[j] != 0x11) fail("64 KiB mapping byte %zu", j);
    munmap(small, 64 * 1024);
    size_t odd = 8 * MIB + 100;
    unsigned char *o = mmap(NULL, odd, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (o == MAP_FAILED) fail("mmap 8 MiB + 100: %s", strerror(errno));
    for (size_t j = 0; j < odd; j += PAGE / 2) o[j] = (unsigned char)(j / PAGE);
    o[odd - 1] = 0x77;
    for (size_t j = 0; j < odd; j += PAGE / 2)
        if (o[j] != (unsigned char)(j / PAGE)) fail("8 MiB + 100 mapping byte %zu", j);
    if (o[odd - 1] != 0x77) fail("last byte of the 8 MiB + 100 mapping");
    if (munmap(o, odd) != 0) fail("munmap 8 MiB + 100: %s", strerror(errno));

    printf("OK remap pages=%zu moved_on_regrow=%d madv_free=%d\n", PAGES(len), moved_on_regrow, have_free);
    return 0;
}
