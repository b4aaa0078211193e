/*
 * The in-guest page walker of `tiermem bench-vm` and of the VM test: it runs
 * as a static program inside a busybox initramfs, owns a block of guest
 * memory, and checks every byte of every page it wrote.
 *
 * Usage: walker MIB PASSES [shuffle|loop|stride|uniform]
 *
 * Pass 0 stamps every page, in address order, with words derived from
 * (page, generation). Each later pass visits every page once, checks all
 * 4096 bytes of a page against the stamp it last wrote, then stamps it
 * with the next generation. The order of a checking pass:
 *   shuffle (the default)  a uniformly random permutation of its own
 *                          (Fisher-Yates), so the distance between two
 *                          visits of a page is random, up to two passes,
 *                          and no prefetcher can guess the next page;
 *   loop                   one random permutation, repeated every pass: a
 *                          loop over memory larger than the cache, in which
 *                          a page comes back exactly one pass later;
 *   stride                 a constant stride modulo the pages, a new one
 *                          each pass: scrambled to a cache, but a pattern a
 *                          stride prefetcher can follow whenever most steps
 *                          do not wrap around;
 *   uniform                as many visits as pages, each to a page drawn
 *                          at random with replacement (uniform random
 *                          access: a page may come back at once or not in
 *                          a pass), checked against the generation it last
 *                          got; after the last pass every page is checked
 *                          once more, in order.
 * The guest's memory is far larger than the host budget, so these reads
 * and writes reach the host's tiers.
 *
 * Every line it prints starts with "walker:" and is parsed by the host:
 *   walker: ready
 *   walker: pass N pages P ns T p50_ns A p99_ns B errors E
 *   walker: done pages_checked C errors E
 * An error line says which page and word differ; at most 20 are printed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define PAGE 4096u
#define WORDS (PAGE / sizeof(uint64_t))
#define BUCKETS 64

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A word no other (page, word, generation) shares: a page written to the
 * wrong place, an old generation or a zero page all fail the check. */
static uint64_t stamp(uint64_t page, uint64_t word, uint64_t gen)
{
    uint64_t x = (page << 20) ^ (word << 8) ^ gen ^ 0x9e3779b97f4a7c15ull;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x | 1; /* never zero */
}

static void fill(uint64_t *p, uint64_t page, uint64_t gen)
{
    for (uint64_t w = 0; w < WORDS; w++)
        p[w] = stamp(page, w, gen);
}

static uint64_t errors;

static void check(const uint64_t *p, uint64_t page, uint64_t gen)
{
    for (uint64_t w = 0; w < WORDS; w++) {
        uint64_t want = stamp(page, w, gen);
        if (p[w] != want) {
            if (errors < 20)
                printf("walker: error page %llu word %llu is %016llx, expected %016llx (generation %llu)\n",
                       (unsigned long long)page, (unsigned long long)w,
                       (unsigned long long)p[w], (unsigned long long)want,
                       (unsigned long long)gen);
            errors++;
        }
    }
}

/* Bucket b holds latencies in [2^(b/2) * (1 or 1.41)): half-octave buckets. */
static unsigned bucket_of(uint64_t ns)
{
    if (ns < 2)
        return 0;
    unsigned lg = 63 - (unsigned)__builtin_clzll(ns);
    unsigned half = (ns >> (lg - 1)) & 1;
    unsigned b = lg * 2 + half;
    return b < BUCKETS ? b : BUCKETS - 1;
}

static uint64_t bucket_upper(unsigned b)
{
    uint64_t base = 1ull << (b / 2);
    return b % 2 ? base * 2 : base + base / 2;
}

static uint64_t percentile(const uint64_t *hist, uint64_t total, double q)
{
    uint64_t want = (uint64_t)(q * (double)total), seen = 0;
    for (unsigned b = 0; b < BUCKETS; b++) {
        seen += hist[b];
        if (seen > want)
            return bucket_upper(b);
    }
    return bucket_upper(BUCKETS - 1);
}

/* xorshift64*: the walker's own generator, so that every run of a given
 * size visits the pages in the same orders. */
static uint64_t next_random(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* Fisher-Yates: `order` becomes a uniformly random permutation of its n
 * pages (the modulo's bias is below 2^-40 for any guest's page count). */
static void shuffle_pages(uint32_t *order, uint64_t n, uint64_t *state)
{
    for (uint64_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    for (uint64_t i = n - 1; i > 0; i--) {
        uint64_t j = next_random(state) % (i + 1);
        uint32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* A stride coprime with n, starting the search at `from`, visits every
 * page once per pass. */
static uint64_t coprime_stride(uint64_t n, uint64_t from)
{
    uint64_t s = from % n | 1;
    for (;; s += 2) {
        uint64_t a = s, b = n;
        while (b) {
            uint64_t t = a % b;
            a = b;
            b = t;
        }
        if (a == 1)
            return s % n ? s : 1;
    }
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: walker MIB PASSES [shuffle|loop|stride|uniform]\n");
        return 2;
    }
    uint64_t mib = strtoull(argv[1], 0, 10), passes = strtoull(argv[2], 0, 10);
    uint64_t pages = mib * (1u << 20) / PAGE;
    if (pages == 0) {
        fprintf(stderr, "walker: MIB must be at least 1\n");
        return 2;
    }
    uint8_t *mem = mmap(0, pages * PAGE, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        perror("walker: mmap");
        return 1;
    }
    const char *how = argc < 4 ? "shuffle" : argv[3];
    int loop = strcmp(how, "loop") == 0, stride_order = strcmp(how, "stride") == 0;
    int uniform = strcmp(how, "uniform") == 0;
    if (!loop && !stride_order && !uniform && strcmp(how, "shuffle") != 0) {
        fprintf(stderr, "walker: unknown order '%s' (shuffle, loop, stride or uniform)\n", how);
        return 2;
    }
    if (pages > UINT32_MAX) {
        fprintf(stderr, "walker: MIB must be below 16 TiB\n");
        return 2;
    }
    /* The visiting order (shuffle, loop), or each page's last generation
     * (uniform). */
    uint32_t *order = 0, *gen = 0;
    if (!stride_order) {
        uint32_t *a = mmap(0, pages * sizeof *a, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (a == MAP_FAILED) {
            perror("walker: mmap of the visiting order");
            return 1;
        }
        *(uniform ? &gen : &order) = a;
    }
    setvbuf(stdout, 0, _IOLBF, 0);
    printf("walker: ready\n");
    uint64_t stride = coprime_stride(pages, pages * 618034u / 1000000u), checked = 0;
    uint64_t seed = 0x2545f4914f6cdd1dull, state = 0x9e3779b97f4a7c15ull;
    static uint64_t hist[BUCKETS];
    for (uint64_t pass = 0; pass <= passes; pass++) {
        memset(hist, 0, sizeof hist);
        uint64_t start = now_ns(), pass_errors = errors, page = 0;
        if (stride_order && pass > 0) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            stride = coprime_stride(pages, seed >> 20);
            page = (seed >> 7) % pages;
        }
        if (order && pass > 0 && (pass == 1 || !loop)) {
            shuffle_pages(order, pages, &state);
            start = now_ns(); /* the pass's time is its visits' alone */
        }
        for (uint64_t i = 0; i < pages; i++) {
            if (pass == 0)
                page = i;
            else if (uniform)
                page = next_random(&state) % pages;
            else if (order)
                page = order[i];
            else
                page = (page + stride) % pages;
            uint64_t *p = (uint64_t *)(mem + page * PAGE);
            uint64_t t0 = now_ns();
            if (pass > 0) {
                /* A permutation's pass checks that the one before visited
                 * every page: each holds the previous generation. */
                check(p, page, uniform ? gen[page] : pass - 1);
                checked++;
            }
            if (uniform)
                gen[page] = (uint32_t)pass;
            fill(p, page, pass);
            hist[bucket_of(now_ns() - t0)]++;
        }
        printf("walker: pass %llu pages %llu ns %llu p50_ns %llu p99_ns %llu errors %llu\n",
               (unsigned long long)pass, (unsigned long long)pages,
               (unsigned long long)(now_ns() - start),
               (unsigned long long)percentile(hist, pages, 0.50),
               (unsigned long long)percentile(hist, pages, 0.99),
               (unsigned long long)(errors - pass_errors));
    }
    for (uint64_t page = 0; uniform && page < pages; page++) {
        check((const uint64_t *)(mem + page * PAGE), page, gen[page]);
        checked++;
    }
    printf("walker: done pages_checked %llu errors %llu\n", (unsigned long long)checked,
           (unsigned long long)errors);
    return errors ? 1 : 0;
}
