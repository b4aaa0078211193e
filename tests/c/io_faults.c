/* A C API client for the store's error paths: a region four times the
 * budget is filled (every byte), read back and checked, half of it is
 * written again, and every byte is checked once more.
 *
 *   io_faults run    the whole job; the environment sets the budget, the
 *                    backing store and any injected faults
 *                    (TIERMEM_INJECT_FAULTS)
 *   io_faults wait   fills the region, prints "filled" and waits for a
 *                    line on stdin before the checks (so that a test can
 *                    damage the backing file meanwhile, or kill it)
 *
 * Exit 0 with "io_faults: ok" when every byte was right; exit 3 with
 * "io_faults: WRONG DATA" when any byte differed, which must never happen:
 * a page tiermem cannot read back must end the program (SIGBUS or abort)
 * with a diagnostic, never come back different. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tiermem.h"

#define MIB (1024UL * 1024UL)
#define PAGE 4096UL
#define REGION (32 * MIB)

static uint8_t byte_at(size_t offset, unsigned generation) {
    size_t page = offset / PAGE;
    return (uint8_t)(page * 131 + (offset % PAGE) * 7 + (offset >> 14) + generation * 29 + 1);
}

/* Generation of each page: 1 after the fill, 2 for the odd pages after
 * the rewrite. */
static unsigned generation_of(size_t page, int rewritten) {
    return rewritten && (page & 1) ? 2 : 1;
}

static size_t wrong_bytes(const uint8_t *p, int rewritten) {
    size_t bad = 0;
    for (size_t i = 0; i < REGION; i++)
        bad += p[i] != byte_at(i, generation_of(i / PAGE, rewritten));
    return bad;
}

static void check(const uint8_t *p, int rewritten, const char *pass) {
    size_t bad = wrong_bytes(p, rewritten);
    if (bad) {
        printf("io_faults: WRONG DATA: %zu bytes differ after %s\n", bad, pass);
        fflush(stdout);
        _exit(3);
    }
}

int main(int argc, char **argv) {
    int wait = argc > 1 && strcmp(argv[1], "wait") == 0;
    if (tm_init(NULL) != 0) {
        fprintf(stderr, "io_faults: tm_init failed: %s\n", tm_last_error());
        return 1;
    }
    uint8_t *p = tm_alloc(REGION);
    if (!p) {
        fprintf(stderr, "io_faults: tm_alloc failed: %s\n", tm_last_error());
        return 1;
    }
    for (size_t i = 0; i < REGION; i++) p[i] = byte_at(i, 1);
    if (wait) {
        printf("filled\n");
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin)) return 1;
    }
    check(p, 0, "the fill");
    for (size_t page = 1; page < REGION / PAGE; page += 2)
        for (size_t i = page * PAGE; i < (page + 1) * PAGE; i++) p[i] = byte_at(i, 2);
    check(p, 1, "the rewrite");
    struct tm_stats st;
    tm_stats(&st);
    printf("io_faults: ok: %lu bytes checked twice; page-ins %llu, page-outs %llu, io errors %llu\n",
           REGION, (unsigned long long)st.page_ins, (unsigned long long)st.page_outs,
           (unsigned long long)st.io_errors);
    return 0;
}
