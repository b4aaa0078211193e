/*
 * The in-guest page walker of `tiermem bench-vm` and of the VM test: it runs
 * as a static program inside a busybox initramfs, owns a block of guest
 * memory, and checks every byte of every page it wrote.
 *
 * Usage: walker MIB PASSES [shuffle|loop]
 *
 * Pass 0 stamps every page with words derived from (page, generation).
 * Each later pass visits every page once in a scrambled order, checks all
 * 4096 bytes of a page against the stamp it last wrote, then stamps it
 * with the next generation. With `shuffle` (the default) each pass has an
 * order of its own, so the distance between two visits of a page is
 * random, as in uniform random access; with `loop` every pass repeats the
 * same order, a loop over memory larger than the cache, in which a page
 * comes back exactly one pass later. The guest's memory is far larger
 * than the host budget, so these reads and writes reach the host's tiers.
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
        fprintf(stderr, "usage: walker MIB PASSES [loop|shuffle]\n");
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
    setvbuf(stdout, 0, _IOLBF, 0);
    printf("walker: ready\n");
    int shuffle = argc < 4 || strcmp(argv[3], "loop") != 0;
    uint64_t stride = coprime_stride(pages, pages * 618034u / 1000000u), checked = 0;
    uint64_t seed = 0x2545f4914f6cdd1dull;
    static uint64_t hist[BUCKETS];
    for (uint64_t pass = 0; pass <= passes; pass++) {
        memset(hist, 0, sizeof hist);
        uint64_t start = now_ns(), pass_errors = errors, page = 0;
        if (shuffle && pass > 0) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            stride = coprime_stride(pages, seed >> 20);
            page = (seed >> 7) % pages;
        }
        for (uint64_t i = 0; i < pages; i++) {
            page = pass == 0 ? i : (page + stride) % pages;
            uint64_t *p = (uint64_t *)(mem + page * PAGE);
            uint64_t t0 = now_ns();
            if (pass > 0) {
                check(p, page, pass - 1);
                checked++;
            }
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
    printf("walker: done pages_checked %llu errors %llu\n", (unsigned long long)checked,
           (unsigned long long)errors);
    return errors ? 1 : 0;
}
