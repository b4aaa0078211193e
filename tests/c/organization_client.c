/* A real C client of the organization fields of struct tm_config. With
 * "good": a 2-way cache built from the memory-mode preset keeps 48 MiB of
 * stamped data in an 8 MiB budget and evicts on set conflicts. With "bad":
 * a malformed associativity is refused with EINVAL and a message naming the
 * variable. Prints "organization_client: ok" on success. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tiermem.h"

#define MIB (1024UL * 1024UL)
#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "organization_client: FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (last error: %s)\n", tm_last_error()); exit(1); } } while (0)

static struct tm_config base_config(const char *backing) {
    struct tm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.dram_budget = 8 * MIB;
    cfg.backing_path = backing;
    return cfg;
}

static int good(const char *backing) {
    struct tm_config cfg = base_config(backing);
    cfg.preset = "memory-mode";
    cfg.associativity = "2"; /* overrides the preset's direct mapping */
    CHECK(tm_init(&cfg) == 0, "tm_init");
    size_t len = 48 * MIB, words = len / 8;
    uint64_t *a = tm_alloc(len);
    CHECK(a != NULL, "tm_alloc");
    for (size_t i = 0; i < words; i += 512) a[i] = i * 2654435761u;
    for (size_t i = 0; i < words; i += 512) CHECK(a[i] == i * 2654435761u, "word %zu", i);
    struct tm_stats st;
    CHECK(tm_stats(&st) == 0, "tm_stats");
    CHECK(st.conflict_evictions > 0, "no conflict evictions");
    CHECK(st.write_throughs == 0, "write-back must not write through");
    CHECK(st.prefetch_issued == 0, "the preset does not prefetch");
    CHECK(st.peak_resident_bytes <= 8 * MIB, "peak %lu", (unsigned long)st.peak_resident_bytes);
    tm_free(a);
    return 0;
}

static int bad(const char *backing) {
    struct tm_config cfg = base_config(backing);
    cfg.associativity = "two";
    errno = 0;
    CHECK(tm_init(&cfg) == -1 && errno == EINVAL, "a bad associativity must fail with EINVAL, errno %d", errno);
    CHECK(strstr(tm_last_error(), "TIERMEM_ASSOCIATIVITY") != NULL, "message: %s", tm_last_error());
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "good";
    const char *backing = argc > 2 ? argv[2] : "/var/tmp";
    int rc = strcmp(mode, "bad") == 0 ? bad(backing) : good(backing);
    if (rc == 0) printf("organization_client: ok\n");
    return rc;
}
