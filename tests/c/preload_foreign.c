/* Shared memory mapped with MAP_FIXED into a reservation of tiered memory,
 * as QEMU maps memory-backend-memfd guest RAM: `tiermem run` lets the range
 * go to the kernel's mapping (not tiered, said on stderr) and takes it back
 * when the program unmaps it. Meant to run under `tiermem run --dram 16M`
 * with SIZE_MIB (the first argument) at least the budget.
 *
 * A PROT_NONE reservation of three SIZE_MIB parts: a memfd is mapped
 * MAP_SHARED | MAP_FIXED into the middle one, and the outer two become
 * tiered read-write memory, so tiermem pages right up to the memfd's edges.
 * Every byte of every part is written and checked:
 * - after 4x the budget of other memory was paged through;
 * - through the memfd's descriptor (pread), so the middle part is the
 *   memfd's pages and not tiered memory;
 * - in a forked child, which also writes the memfd for the parent to see;
 * - after mlock and munlock across a tiered part and the memfd;
 * - after a failed MAP_FIXED (a bad descriptor) over a tiered part, which
 *   must leave it as it was, as the kernel does;
 * - after the memfd is mapped again over itself, then unmapped, and tiered
 *   memory mapped there with MAP_FIXED: zeros first, then paged like the
 *   rest.
 * Prints a line starting with "OK" and exits 0, or "FAIL ..." and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB (1024UL * 1024UL)

static void fail(const char *what, size_t at) {
    printf("FAIL: %s (byte %zu)\n", what, at);
    exit(1);
}

static uint8_t pattern(size_t i, unsigned seed) {
    return (uint8_t)(i * 7 + (i >> 12) * 13 + seed * 101);
}

static void fill(uint8_t *p, size_t len, unsigned seed) {
    for (size_t i = 0; i < len; i++) p[i] = pattern(i, seed);
}

static void check(const uint8_t *p, size_t len, unsigned seed, const char *what) {
    for (size_t i = 0; i < len; i++)
        if (p[i] != pattern(i, seed)) fail(what, i);
}

static void check_zero(const uint8_t *p, size_t len, const char *what) {
    for (size_t i = 0; i < len; i++)
        if (p[i]) fail(what, i);
}

/* The memfd's bytes read through its descriptor, not the mapping. */
static void check_through_fd(int fd, size_t len, unsigned seed) {
    uint8_t *buf = malloc(MIB);
    if (!buf) fail("malloc", 0);
    for (size_t off = 0; off < len; off += MIB) {
        if (pread(fd, buf, MIB, (off_t)off) != (ssize_t)MIB) fail("pread of the memfd", off);
        for (size_t i = 0; i < MIB; i++)
            if (buf[i] != pattern(off + i, seed)) fail("the memfd read through its descriptor", off + i);
    }
    free(buf);
}

/* Pages 4x the budget through other tiered memory. */
static void churn(size_t budget) {
    size_t len = 4 * budget;
    uint8_t *p = malloc(len);
    if (!p) fail("malloc for churn", 0);
    fill(p, len, 9);
    check(p, len, 9, "churned memory");
    free(p);
}

static void *map_or_die(void *addr, size_t len, int prot, int flags, int fd, const char *what) {
    void *p = mmap(addr, len, prot, flags, fd, 0);
    if (p == MAP_FAILED) {
        perror(what);
        exit(1);
    }
    if (addr && p != addr) fail(what, 0);
    return p;
}

int main(int argc, char **argv) {
    size_t len = (argc > 1 ? strtoul(argv[1], NULL, 10) : 32) * MIB;
    size_t budget = (argc > 2 ? strtoul(argv[2], NULL, 10) : 16) * MIB;
    uint8_t *reserve = map_or_die(NULL, 3 * len, PROT_NONE,
                                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, "reservation");
    uint8_t *left = reserve, *ram = reserve + len, *right = reserve + 2 * len;

    int fd = memfd_create("guest-ram", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        perror("memfd");
        return 1;
    }
    map_or_die(ram, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, "memfd in the reservation");
    if (mprotect(left, len, PROT_READ | PROT_WRITE) || mprotect(right, len, PROT_READ | PROT_WRITE))
        fail("mprotect of the tiered parts", 0);
    if (madvise(ram, len, MADV_HUGEPAGE) && errno != EINVAL) fail("madvise of the memfd", 0);

    fill(left, len, 1);
    fill(ram, len, 2);
    fill(right, len, 3);
    churn(budget);
    check(left, len, 1, "tiered part before the memfd");
    check(ram, len, 2, "memfd");
    check(right, len, 3, "tiered part after the memfd");
    check_through_fd(fd, len, 2);

    pid_t child = fork();
    if (child < 0) fail("fork", 0);
    if (child == 0) {
        check(left, len, 1, "tiered part, in the child");
        check(ram, len, 2, "memfd, in the child");
        check(right, len, 3, "tiered part, in the child");
        fill(ram, len, 4);
        churn(budget);
        check(ram, len, 4, "memfd written by the child, in the child");
        _exit(0);
    }
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail("the child's checks", (size_t)status);
    check(ram, len, 4, "memfd written by the child");
    check(left, len, 1, "tiered part before the memfd, after the child");

    if (mlock(ram - 4096, 8192) || munlock(ram - 4096, 8192)) fail("mlock across the memfd's edge", 0);

    errno = 0;
    if (mmap(left, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, -1, 0) != MAP_FAILED ||
        errno != EBADF)
        fail("MAP_FIXED with a bad descriptor should fail with EBADF", (size_t)errno);
    check(left, len, 1, "tiered part after a failed MAP_FIXED over it");

    map_or_die(ram, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, "memfd over itself");
    check(ram, len, 4, "memfd mapped again");
    if (munmap(ram, len)) fail("munmap of the memfd", 0);
    check_through_fd(fd, len, 4);
    map_or_die(ram, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
               "tiered memory where the memfd was");
    check_zero(ram, len, "tiered memory where the memfd was");
    fill(ram, len, 5);
    churn(budget);
    check(left, len, 1, "tiered part before, at the end");
    check(ram, len, 5, "tiered memory where the memfd was, after paging");
    check(right, len, 3, "tiered part after, at the end");
    close(fd);
    printf("OK: every byte of three %zu MiB parts, the middle one a memfd and then tiered\n", len / MIB);
    return 0;
}
