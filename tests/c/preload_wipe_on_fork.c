/* MADV_WIPEONFORK on tiered memory gives a forked child zeros, as the
 * kernel does, even where the parent's pages were evicted to the store.
 * Meant to run under `tiermem run --dram 16M`.
 *
 * The parent stamps a 48 MiB region R and 4 MiB regions M and N, more than three times
 * its budget, so most pages leave DRAM, and advises:
 * - R[8M, 40M) MADV_WIPEONFORK, then R[16M, 24M) MADV_KEEPONFORK;
 * - R[32M, 36M) replaced by a new mapping (MAP_FIXED) and stamped anew:
 *   the advice ends with the old mapping;
 * - M MADV_WIPEONFORK, then grown to 8 MiB by mremap, which must move it
 *   (a mapping follows it), its new half stamped: the advice goes along,
 *   and covers the new half too;
 * - N, 4 MiB likewise, grown in place by mremap into a hole left after it.
 *
 * The child checks every byte: zeros where the advice holds, the parent's
 * bytes elsewhere. It stamps its wiped pages anew, pages through its
 * memory, forks a grandchild, which reads zeros there again (the advice
 * holds in the child), and checks its own bytes once the grandchild is
 * done. The parent checks every byte of its own memory last: nothing its
 * children did reached it.
 *
 * Prints "OK ..." and exits 0, or "FAIL ..." and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#define MADV_KEEPONFORK 19
#endif

#define MIB (1024UL * 1024UL)
#define R_LEN (48 * MIB)
#define M_LEN (4 * MIB)

static const char *who = "parent";

static void fail(const char *what) {
    printf("FAIL %s: %s (errno %d: %s)\n", who, what, errno, strerror(errno));
    fflush(stdout);
    exit(1);
}

static uint8_t stamp(size_t i, unsigned gen) {
    return (uint8_t)(i * 31 + (i >> 12) * 7 + gen * 101 + 1);
}

static void fill(uint8_t *p, size_t from, size_t to, unsigned gen) {
    for (size_t i = from; i < to; i++) p[i] = stamp(i, gen);
}

/* Every byte of p[from, to) is stamp(i, gen), or zero when gen is 0. */
static void expect(const uint8_t *p, size_t from, size_t to, unsigned gen, const char *what) {
    for (size_t i = from; i < to; i++) {
        uint8_t want = gen ? stamp(i, gen) : 0;
        if (p[i] != want) {
            printf("FAIL %s: %s: byte %zu is %u, not %u\n", who, what, i, p[i], want);
            fflush(stdout);
            exit(1);
        }
    }
}

static uint8_t *map_anon(size_t len) {
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("mmap");
    return p;
}

static void advise(void *p, size_t len, int advice, const char *what) {
    if (madvise(p, len, advice) != 0) fail(what);
}

/* What R holds outside its wiped parts: the first stamp, and the second
 * where the new mapping went. */
static void expect_r_kept(const uint8_t *r) {
    expect(r, 0, 8 * MIB, 1, "R[0, 8M), not advised");
    expect(r, 16 * MIB, 24 * MIB, 1, "R[16M, 24M), advised MADV_KEEPONFORK");
    expect(r, 32 * MIB, 36 * MIB, 2, "R[32M, 36M), mapped anew");
    expect(r, 40 * MIB, R_LEN, 1, "R[40M, 48M), not advised");
}

/* The wiped parts of R, for the child: zeros (gen 0) or its own stamp. */
static void expect_r_wiped(const uint8_t *r, unsigned gen) {
    expect(r, 8 * MIB, 16 * MIB, gen, "R[8M, 16M), advised MADV_WIPEONFORK");
    expect(r, 24 * MIB, 32 * MIB, gen, "R[24M, 32M), advised MADV_WIPEONFORK");
    expect(r, 36 * MIB, 40 * MIB, gen, "R[36M, 40M), advised MADV_WIPEONFORK");
}

static void fill_r_wiped(uint8_t *r, unsigned gen) {
    fill(r, 8 * MIB, 16 * MIB, gen);
    fill(r, 24 * MIB, 32 * MIB, gen);
    fill(r, 36 * MIB, 40 * MIB, gen);
}

static int wait_for(pid_t pid) {
    int status;
    if (waitpid(pid, &status, 0) != pid) fail("waitpid");
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void grandchild(const uint8_t *r, const uint8_t *m, const uint8_t *n) {
    who = "grandchild";
    expect_r_wiped(r, 0);
    expect_r_kept(r);
    expect(m, 0, 2 * M_LEN, 0, "M, advised and moved");
    expect(n, 0, 2 * M_LEN, 0, "N, advised and grown in place");
    exit(0);
}

static void child(uint8_t *r, uint8_t *m, uint8_t *n) {
    who = "child";
    expect_r_wiped(r, 0);
    expect_r_kept(r);
    expect(m, 0, 2 * M_LEN, 0, "M, advised and moved");
    expect(n, 0, 2 * M_LEN, 0, "N, advised and grown in place");
    /* The wiped pages are the child's own memory now. */
    fill_r_wiped(r, 5);
    fill(m, 0, 2 * M_LEN, 6);
    fill(n, 0, 2 * M_LEN, 7);
    expect_r_wiped(r, 5);
    expect_r_kept(r);
    pid_t pid = fork();
    if (pid < 0) fail("fork of the grandchild");
    if (pid == 0) grandchild(r, m, n);
    int code = wait_for(pid);
    if (code != 0) {
        printf("FAIL child: the grandchild exited with %d\n", code);
        exit(1);
    }
    expect_r_wiped(r, 5);
    expect_r_kept(r);
    expect(m, 0, 2 * M_LEN, 6, "M, stamped by the child");
    expect(n, 0, 2 * M_LEN, 7, "N, stamped by the child");
    exit(0);
}

/* A 4 MiB region, stamped with `gen` and advised MADV_WIPEONFORK, grown to
 * 8 MiB by mremap and its new half stamped with `gen + 1`: moved (a mapping
 * is put right after it) or grown in place (into a hole left after it). */
static uint8_t *advise_and_grow(unsigned gen, int move) {
    uint8_t *p = map_anon(2 * M_LEN);
    if (munmap(p + M_LEN, M_LEN) != 0) fail("munmap of a region's second half");
    if (move) {
        void *blocker = mmap(p + M_LEN, M_LEN, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (blocker != p + M_LEN) fail("mmap MAP_FIXED_NOREPLACE after a region");
    }
    fill(p, 0, M_LEN, gen);
    advise(p, M_LEN, MADV_WIPEONFORK, "MADV_WIPEONFORK on a region to grow");
    uint8_t *grown = mremap(p, M_LEN, 2 * M_LEN, move ? MREMAP_MAYMOVE : 0);
    if (grown == MAP_FAILED) fail("mremap");
    if ((grown != p) != move) {
        printf("FAIL parent: mremap %s the region\n", move ? "did not move" : "moved");
        exit(1);
    }
    fill(grown, M_LEN, 2 * M_LEN, gen + 1);
    expect(grown, 0, M_LEN, gen, "a region's first half after mremap");
    return grown;
}

int main(void) {
    uint8_t *r = map_anon(R_LEN);
    fill(r, 0, R_LEN, 1);
    advise(r + 8 * MIB, 32 * MIB, MADV_WIPEONFORK, "MADV_WIPEONFORK on R");
    advise(r + 16 * MIB, 8 * MIB, MADV_KEEPONFORK, "MADV_KEEPONFORK on R");
    void *fixed = mmap(r + 32 * MIB, 4 * MIB, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (fixed != r + 32 * MIB) fail("mmap MAP_FIXED over R");
    fill(r, 32 * MIB, 36 * MIB, 2);

    uint8_t *m = advise_and_grow(3, 1);
    uint8_t *n = advise_and_grow(8, 0);
    expect(r, 0, 32 * MIB, 1, "R[0, 32M) before the fork");

    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) fail("fork");
    if (pid == 0) child(r, m, n);
    int code = wait_for(pid);
    if (code != 0) {
        printf("FAIL parent: the child exited with %d\n", code);
        return 1;
    }
    expect(r, 0, 32 * MIB, 1, "R[0, 32M)");
    expect(r, 32 * MIB, 36 * MIB, 2, "R[32M, 36M)");
    expect(r, 36 * MIB, R_LEN, 1, "R[36M, 48M)");
    expect(m, 0, M_LEN, 3, "M's first half");
    expect(m, M_LEN, 2 * M_LEN, 4, "M's second half");
    expect(n, 0, M_LEN, 8, "N's first half");
    expect(n, M_LEN, 2 * M_LEN, 9, "N's second half");
    printf("OK zeros for the child and the grandchild where advised, every byte kept for the parent\n");
    return 0;
}
