/* A real C client of libtiermem: every API call, checked. Exits 0 on
 * success and prints "api_client: ok". */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tiermem.h"

#define MIB (1024UL * 1024UL)
#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "api_client: FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (last error: %s)\n", tm_last_error()); exit(1); } } while (0)

static void stamp(uint64_t *p, size_t words, uint64_t seed) {
    for (size_t i = 0; i < words; i += 512) p[i] = i ^ seed;
}
static void verify(const uint64_t *p, size_t words, uint64_t seed) {
    for (size_t i = 0; i < words; i += 512) CHECK(p[i] == (i ^ seed), "word %zu: %lx", i, (unsigned long)p[i]);
}

int main(int argc, char **argv) {
    const char *backing = argc > 1 ? argv[1] : "/var/tmp";
    struct tm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.dram_budget = 16 * MIB;
    cfg.backing_path = backing;
    cfg.policy = "clock";
    CHECK(tm_init(&cfg) == 0, "tm_init");
    CHECK(tm_init(&cfg) == -1 && errno == EBUSY, "second tm_init must fail with EBUSY, got errno %d", errno);
    CHECK(tm_get_dram_budget() == 16 * MIB, "budget %zu", tm_get_dram_budget());

    /* Bad sizes. */
    errno = 0;
    CHECK(tm_alloc(0) == NULL && errno == EINVAL, "tm_alloc(0) errno %d", errno);
    CHECK(tm_alloc(SIZE_MAX) == NULL && errno == ENOMEM, "tm_alloc(SIZE_MAX) errno %d", errno);
    CHECK(strlen(tm_last_error()) > 0, "an error message is set");

    /* 64 MiB in a 16 MiB budget: zeroed, stamped, verified after paging. */
    size_t len = 64 * MIB, words = len / 8;
    uint64_t *a = tm_alloc(len);
    CHECK(a != NULL, "tm_alloc(64M)");
    CHECK(((uintptr_t)a & 4095) == 0, "page aligned");
    for (size_t i = 0; i < words; i += 4096) CHECK(a[i] == 0, "zeroed at %zu", i);
    stamp(a, words, 0xA11CE);
    verify(a, words, 0xA11CE);

    /* read(2) into the evicted head of the buffer: the fscanf case. */
    int fd = open("/proc/self/exe", O_RDONLY);
    CHECK(fd >= 0, "open");
    char expect[4096];
    CHECK(pread(fd, expect, sizeof expect, 0) == (ssize_t)sizeof expect, "pread");
    CHECK(pread(fd, (char *)a, sizeof expect, 0) == (ssize_t)sizeof expect, "pread into evicted tiered memory: %s", strerror(errno));
    CHECK(memcmp(a, expect, sizeof expect) == 0, "bytes read into tiered memory");
    close(fd);
    stamp(a, 512, 0xA11CE); /* restore the stamp of the first page */

    /* realloc past the budget keeps the contents. */
    uint64_t *b = tm_realloc(a, 96 * MIB);
    CHECK(b != NULL, "tm_realloc");
    verify(b, words, 0xA11CE);

    /* Budget change at run time. */
    CHECK(tm_set_dram_budget(8 * MIB) == 0, "shrink");
    CHECK(tm_get_dram_budget() == 8 * MIB, "budget after shrink");
    struct tm_stats st;
    CHECK(tm_stats(&st) == 0, "tm_stats");
    CHECK(st.resident_bytes <= 8 * MIB, "resident %lu over budget", (unsigned long)st.resident_bytes);
    CHECK(tm_set_dram_budget(4096) == -1 && errno == EINVAL, "tiny budget must be refused");
    verify(b, words, 0xA11CE);
    CHECK(tm_stats(&st) == 0, "tm_stats");
    CHECK(st.page_ins > 0 && st.page_outs > 0 && st.faults > 0, "paging happened");
    CHECK(st.fault_latency.count > 0 && st.fault_latency.p50_ns > 0, "latency summary");
    CHECK(st.budget_bytes == 8 * MIB, "budget in stats");
    CHECK(st.prefetch_hits <= st.prefetch_issued, "read-ahead hits %lu of %lu issued",
          (unsigned long)st.prefetch_hits, (unsigned long)st.prefetch_issued);
    CHECK(st.prefetch_issued > 0, "the sequential checks above must have been read ahead");
    CHECK(tm_stats(NULL) == -1 && errno == EINVAL, "tm_stats(NULL)");

    /* Read-modify-write of random pages (a load, then a store): once most
     * pages read in get written, read faults install them writable. */
    volatile uint64_t *v = b;
    uint64_t x = 88172645463325252ULL;
    for (int n = 0; n < 20000; n++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        size_t i = (size_t)(x % (words / 512)) * 512;
        uint64_t old = v[i];
        v[i] = old ^ 1;
        v[i] = old;
    }
    verify(b, words, 0xA11CE);
    CHECK(tm_stats(&st) == 0, "tm_stats");
    CHECK(st.predicted_writes > 0, "read-modify-write misses must be predicted as writes");

    /* The header and the library agree on struct tm_stats: the library
     * writes its last field and nothing past it. */
    struct { struct tm_stats st; uint64_t guard; } layout;
    memset(&layout, 0xff, sizeof layout);
    CHECK(tm_stats(&layout.st) == 0, "tm_stats");
    CHECK(layout.guard == UINT64_MAX, "tm_stats wrote past struct tm_stats");
    CHECK(layout.st.compress_bypassed != UINT64_MAX, "tm_stats left the struct's last field unwritten");

    tm_free(b);
    tm_free(NULL);
    CHECK(tm_stats(&st) == 0 && st.allocated_bytes == 0, "freed");
    printf("api_client: ok: %lu faults, %lu page-ins, %lu page-outs, %lu clean drops, fault p50 %lu ns\n",
           (unsigned long)st.faults, (unsigned long)st.page_ins, (unsigned long)st.page_outs,
           (unsigned long)st.clean_drops, (unsigned long)st.fault_latency.p50_ns);
    return 0;
}
