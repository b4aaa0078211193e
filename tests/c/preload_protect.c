/* Memory whose protection the program changed, then unmapped, is mapped
 * again read-write and written: it must not keep the old protection (a
 * coroutine library's stack with a PROT_NONE guard page, say). 64 rounds of
 * a 4 MiB mapping: filled, a page made PROT_NONE and one PROT_READ,
 * unmapped; a new 4 MiB mapping (under `tiermem run`, the same pages of the
 * arena) filled and checked.
 * Prints a line starting with "OK" and exits 0. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MIB (1024UL * 1024UL)
#define FAIL(...) do { printf("FAIL: " __VA_ARGS__); printf("\n"); exit(1); } while (0)

int main(void) {
    size_t len = 4 * MIB;
    for (int round = 0; round < 64; round++) {
        uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) FAIL("mmap: %m");
        memset(p, round, len);
        if (mprotect(p, 4096, PROT_NONE) != 0) FAIL("mprotect: %m");
        if (mprotect(p + len / 2, 4096, PROT_READ) != 0) FAIL("mprotect: %m");
        if (munmap(p, len) != 0) FAIL("munmap: %m");
        uint8_t *q = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (q == MAP_FAILED) FAIL("mmap again: %m");
        memset(q, 0x5a, len); /* SIGSEGV here if q kept p's protection */
        for (size_t i = 0; i < len; i++)
            if (q[i] != 0x5a) FAIL("round %d byte %zu", round, i);
        if (munmap(q, len) != 0) FAIL("munmap again: %m");
    }
    printf("OK: 64 rounds\n");
    return 0;
}
