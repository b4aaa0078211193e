/* Random permutation passes over memory advised MADV_HUGEPAGE (or not), as a
 * guest walks its RAM: one sequential pass writes every page, then each pass
 * visits every page once in a new random order, checks every byte against
 * what the pass before wrote, and writes the page anew. A final pass checks
 * every page once more.
 *
 *   preload_huge advise|plain MIB PASSES
 *
 * Under `tiermem run`, advised memory is kept resident by 2 MiB regions
 * (policy/huge_regions.rs), which the test sees as fewer page-ins than the
 * same run without the advice. Exit status 0 and one line on stdout when
 * every byte was right (its last line starts with "OK"). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define PAGE 4096

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t next_random(void) {
    /* xorshift64*: the same orders in every run. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

/* The byte at `offset` of `page` after pass `pass` wrote it. */
static unsigned char expected(size_t page, unsigned pass, size_t offset) {
    uint64_t x = (uint64_t)page * 0x100000001b3ull + pass * 0x9e37ull + offset / 8;
    return (unsigned char)(x >> ((offset % 8) * 8)) ^ (unsigned char)(offset * 131 + pass);
}

static void write_page(unsigned char *p, size_t page, unsigned pass) {
    for (size_t i = 0; i < PAGE; i++)
        p[i] = expected(page, pass, i);
}

static int check_page(const unsigned char *p, size_t page, unsigned pass) {
    for (size_t i = 0; i < PAGE; i++) {
        if (p[i] != expected(page, pass, i)) {
            fprintf(stderr, "page %zu byte %zu: %u, expected %u (pass %u)\n", page, i, p[i],
                    expected(page, pass, i), pass);
            return 0;
        }
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 4 || (strcmp(argv[1], "advise") != 0 && strcmp(argv[1], "plain") != 0)) {
        fprintf(stderr, "usage: %s advise|plain MIB PASSES\n", argv[0]);
        return 2;
    }
    int advise = strcmp(argv[1], "advise") == 0;
    size_t pages = (size_t)atol(argv[2]) * 256;
    unsigned passes = (unsigned)atoi(argv[3]);
    if (pages == 0 || passes == 0) {
        fprintf(stderr, "MIB and PASSES must be positive\n");
        return 2;
    }
    unsigned char *mem = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    if (advise && madvise(mem, pages * PAGE, MADV_HUGEPAGE) != 0) {
        perror("madvise(MADV_HUGEPAGE)");
        return 1;
    }
    size_t *order = malloc(pages * sizeof *order);
    if (!order) {
        perror("malloc");
        return 1;
    }
    for (size_t i = 0; i < pages; i++) {
        order[i] = i;
        write_page(mem + i * PAGE, i, 0);
    }
    for (unsigned pass = 1; pass <= passes; pass++) {
        for (size_t i = pages - 1; i > 0; i--) {
            size_t j = next_random() % (i + 1);
            size_t t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (size_t i = 0; i < pages; i++) {
            size_t page = order[i];
            if (!check_page(mem + page * PAGE, page, pass - 1))
                return 1;
            write_page(mem + page * PAGE, page, pass);
        }
    }
    for (size_t page = 0; page < pages; page++)
        if (!check_page(mem + page * PAGE, page, passes))
            return 1;
    printf("OK %s: %zu pages, %u random passes, every byte right\n", argv[1], pages, passes);
    return 0;
}
