/* Tiered pages the program makes unreadable (mprotect PROT_NONE) while
 * they are resident and dirty, then pages past them. Meant to run under
 * `tiermem run --dram 16M`.
 *
 * The evictor copies a dirty victim before it unmaps it; through the
 * mapping, a PROT_NONE page faults and the process dies with SIGSEGV in
 * the evictor's thread. 64 MiB are filled with a pattern, every 8th page
 * is made PROT_NONE and every 8th+4 page PROT_READ, the rest is written
 * three times over (so the protected pages leave DRAM), then protections
 * are restored and every byte is checked, the protected pages' too.
 * Prints "OK ..." and exits 0, or "FAIL ..." and exits 1. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#define MIB (1024UL * 1024UL)
#define PAGE 4096UL

static uint8_t pattern(size_t i, unsigned round) { return (uint8_t)(i * 7 + (i >> 12) + round); }

int main(void) {
    size_t len = 64 * MIB, pages = len / PAGE;
    uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    for (size_t i = 0; i < len; i++) p[i] = pattern(i, 0);
    for (size_t pg = 0; pg < pages; pg += 8) {
        if (mprotect(p + pg * PAGE, PAGE, PROT_NONE) != 0) { printf("FAIL mprotect\n"); return 1; }
        if (mprotect(p + (pg + 4) * PAGE, PAGE, PROT_READ) != 0) { printf("FAIL mprotect\n"); return 1; }
    }
    for (unsigned round = 1; round <= 3; round++)
        for (size_t pg = 0; pg < pages; pg++)
            if (pg % 4 != 0)
                for (size_t i = pg * PAGE; i < (pg + 1) * PAGE; i += 512) p[i] = pattern(i, round);
    for (size_t pg = 0; pg < pages; pg += 4)
        if (mprotect(p + pg * PAGE, PAGE, PROT_READ | PROT_WRITE) != 0) { printf("FAIL mprotect\n"); return 1; }
    for (size_t i = 0; i < len; i++) {
        size_t pg = i / PAGE;
        uint8_t want = (pg % 4 == 0 || i % 512 != 0) ? pattern(i, 0) : pattern(i, 3);
        if (p[i] != want) {
            printf("FAIL byte %zu (page %zu) is %02x, expected %02x\n", i, pg, p[i], want);
            return 1;
        }
    }
    printf("OK %zu pages checked, a quarter of them protected while paging\n", pages);
    return 0;
}
