/* Locked memory under tiermem run: it stays in DRAM and never reaches the
 * backing store. Meant to run under `tiermem run --dram 8M`.
 *
 * A 1 MiB malloc'd secret is locked (unless MODE is "nolock"), filled with
 * a marker text, and checked byte by byte after 64 MiB of other memory has
 * been paged through the budget twice. Then: mlockall() must be refused
 * with ENOMEM, locking more than half the budget must fail with EAGAIN,
 * and a MAP_LOCKED mapping works as usual.
 *
 * Usage: preload_mlock [lock|nolock]
 * Prints "OK ..." and exits 0, or "FAIL ..." and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MIB ((size_t)1 << 20)
#define SECRET MIB
#define OTHER (64 * MIB)

static void fail(const char *what) {
    printf("FAIL %s: %s\n", what, strerror(errno));
    exit(1);
}

static void fill_secret(char *p) {
    for (size_t i = 0; i < SECRET; i += 32) snprintf(p + i, 32, "TIERMEM-LOCKED-SECRET-%08zu", i);
}

static int secret_intact(const char *p) {
    char want[32];
    for (size_t i = 0; i < SECRET; i += 32) {
        snprintf(want, sizeof want, "TIERMEM-LOCKED-SECRET-%08zu", i);
        if (memcmp(p + i, want, 31) != 0) return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    int lock = !(argc > 1 && strcmp(argv[1], "nolock") == 0);
    char *secret = malloc(SECRET);
    if (!secret) fail("malloc");
    if (lock && mlock(secret, SECRET) != 0) fail("mlock");
    fill_secret(secret);

    uint8_t *other = malloc(OTHER);
    if (!other) fail("malloc");
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < OTHER; i += 4096) other[i] = (uint8_t)(i >> 12) + (uint8_t)pass;
    for (size_t i = 0; i < OTHER; i += 4096)
        if (other[i] != (uint8_t)((uint8_t)(i >> 12) + 1)) fail("the paged memory changed");
    if (!secret_intact(secret)) {
        printf("FAIL the locked secret changed\n");
        return 1;
    }

    errno = 0;
    if (mlockall(MCL_CURRENT | MCL_FUTURE) == 0 || errno != ENOMEM) fail("mlockall was not refused");
    char *big = malloc(6 * MIB);
    if (!big) fail("malloc");
    errno = 0;
    if (mlock(big, 6 * MIB) == 0 || errno != EAGAIN) fail("locking 6 MiB of an 8 MiB budget");

    char *locked_map = mmap(NULL, 2 * MIB, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_LOCKED, -1, 0);
    if (locked_map == MAP_FAILED) fail("mmap MAP_LOCKED");
    memset(locked_map, 7, 2 * MIB);
    for (size_t i = 0; i < 2 * MIB; i++)
        if (locked_map[i] != 7) fail("the MAP_LOCKED mapping changed");
    munmap(locked_map, 2 * MIB);

    if (lock && munlock(secret, SECRET) != 0) fail("munlock");
    /* Keep the secret alive to the end, so the store is checked while the
     * process still holds it. */
    printf("OK %s secret=%zu other=%zu\n", lock ? "locked" : "unlocked", (size_t)SECRET,
           (size_t)OTHER);
    fflush(stdout);
    return secret[0] == 'T' ? 0 : 1;
}
