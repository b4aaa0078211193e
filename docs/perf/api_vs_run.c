/* The same random-access workload through the C API and under `tiermem run`.
 *
 *   make   (builds, and links target/release/libtiermem.so.0, the SONAME)
 *   cc -O2 docs/perf/api_vs_run.c -Iinclude -Ltarget/release -ltiermem -o api_vs_run
 *   LD_LIBRARY_PATH=target/release ./api_vs_run api 2048 512 10
 *   tiermem run --dram 512M -- ./api_vs_run malloc 2048 512 10
 *
 * MODE api: tm_init with the budget, then tm_alloc; MODE malloc: plain malloc
 * (tiered by `tiermem run`). Every page is filled with random bytes, then for
 * SECONDS a uniform random page is touched, half the touches a read of one
 * word and half a write; prints "pages/s N". Links libtiermem.so either way
 * (the malloc mode calls nothing of it). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tiermem.h"

#define PAGE 4096UL

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t next(uint64_t *x) {
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return *x;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s api|malloc WORKING_SET_MIB BUDGET_MIB SECONDS\n", argv[0]);
        return 2;
    }
    size_t bytes = strtoul(argv[2], NULL, 10) << 20;
    size_t budget = strtoul(argv[3], NULL, 10) << 20;
    double seconds = atof(argv[4]);
    uint64_t *mem;
    if (strcmp(argv[1], "api") == 0) {
        struct tm_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.dram_budget = budget;
        if (tm_init(&cfg) != 0) {
            fprintf(stderr, "tm_init: %s\n", tm_last_error());
            return 1;
        }
        mem = tm_alloc(bytes);
    } else {
        mem = malloc(bytes);
    }
    if (!mem) {
        perror("allocating the working set");
        return 1;
    }
    size_t pages = bytes / PAGE, words = PAGE / 8;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < bytes / 8; i++) mem[i] = next(&x);
    uint64_t touched = 0, sum = 0;
    double start = now(), end = start + seconds;
    while (1) {
        for (int k = 0; k < 256; k++) {
            uint64_t r = next(&x);
            uint64_t *w = mem + (r % pages) * words + (r >> 40) % words;
            if (r & (1ull << 63)) *w = r;
            else sum += *w;
        }
        touched += 256;
        if (now() >= end) break;
    }
    printf("pages/s %.0f (%s, checksum %llu)\n", touched / (now() - start), argv[1],
           (unsigned long long)(sum & 0xff));
    return 0;
}
