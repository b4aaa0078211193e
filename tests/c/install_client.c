/* A client of an installed tiermem, built with
 * `cc install_client.c $(pkg-config --cflags --libs tiermem)`: it pages
 * 32 MiB through an 8 MiB budget in the backing directory argv[1], checks
 * every page, and prints the library's version and the file it was loaded
 * from, which must be the installed one. Prints "install_client: ok" last. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tiermem.h>

#define MIB (1024UL * 1024UL)
#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "install_client: FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (last error: %s)\n", tm_last_error()); exit(1); } } while (0)

/* splitmix64's finaliser: a different, incompressible word for each index. */
static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

int main(int argc, char **argv) {
    CHECK(argc == 2, "usage: install_client BACKING_DIR");
    struct tm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.dram_budget = 8 * MIB;
    cfg.backing_path = argv[1];
    CHECK(tm_init(&cfg) == 0, "tm_init");

    /* Random words, so that no compressed tier keeps the pages in DRAM. */
    size_t words = 32 * MIB / sizeof(uint64_t);
    uint64_t *p = tm_alloc(words * sizeof(uint64_t));
    CHECK(p != NULL, "tm_alloc(32M)");
    for (size_t i = 0; i < words; i++) p[i] = mix(i);
    for (size_t i = 0; i < words; i++) CHECK(p[i] == mix(i), "word %zu", i);

    struct tm_stats st;
    CHECK(tm_stats(&st) == 0, "tm_stats");
    CHECK(st.page_outs > 0, "32 MiB in an 8 MiB budget paged nothing out");
    tm_free(p);

    Dl_info info;
    CHECK(dladdr((void *)tm_version, &info) != 0 && info.dli_fname != NULL, "dladdr(tm_version)");
    printf("version %s header %s\n", tm_version(), TIERMEM_VERSION);
    printf("library %s\n", info.dli_fname);
    printf("page-outs %llu\n", (unsigned long long)st.page_outs);
    printf("install_client: ok\n");
    return 0;
}
