/* Mappings `tiermem run` does not tier, beside two it does. Each region is
 * SIZE_MIB (the first argument, at least the budget the test gives), every
 * byte written and checked:
 * - shared anonymous memory (MAP_SHARED | MAP_ANONYMOUS);
 * - a memfd mapped MAP_SHARED (how QEMU's memory-backend-memfd maps RAM);
 * - private memory mapped at a fixed address outside tiermem's arena
 *   (over the shared mapping, once it is done with);
 * - a PROT_NONE reservation with read-write memory mapped into it at a
 *   fixed address (how QEMU and JVMs reserve, then map), which is tiered;
 * - plain private anonymous memory, which is tiered and not reported.
 * The test checks that stderr names each untiered one with its size.
 * Prints a line starting with "OK" and exits 0. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define MIB (1024UL * 1024UL)

static void fill_and_check(uint8_t *p, size_t len, const char *what) {
    for (size_t i = 0; i < len; i++) p[i] = (uint8_t)(i * 7 + (i >> 12));
    for (size_t i = 0; i < len; i++)
        if (p[i] != (uint8_t)(i * 7 + (i >> 12))) {
            printf("preload_untiered: FAIL: %s byte %zu\n", what, i);
            exit(1);
        }
}

static void *map_or_die(void *addr, size_t len, int prot, int flags, int fd, const char *what) {
    void *p = mmap(addr, len, prot, flags, fd, 0);
    if (p == MAP_FAILED) {
        perror(what);
        exit(1);
    }
    return p;
}

int main(int argc, char **argv) {
    size_t len = (argc > 1 ? strtoul(argv[1], NULL, 10) : 64) * MIB;
    uint8_t *shared = map_or_die(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                                 -1, "shared anonymous");
    fill_and_check(shared, len, "shared anonymous");

    int fd = memfd_create("guest-ram", 0);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        perror("memfd");
        return 1;
    }
    uint8_t *memfd = map_or_die(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, "memfd");
    fill_and_check(memfd, len, "memfd");

    uint8_t *over = map_or_die(shared, len, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, "fixed over shared");
    fill_and_check(over, len, "fixed over shared");

    uint8_t *reserved = map_or_die(NULL, len, PROT_NONE,
                                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, "reservation");
    uint8_t *inside = map_or_die(reserved, len, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1,
                                 "fixed mapping in the reservation");
    fill_and_check(inside, len, "fixed mapping");

    uint8_t *plain = map_or_die(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                                -1, "plain");
    fill_and_check(plain, len, "plain");
    printf("OK: every byte of five %zu MiB mappings\n", len / MIB);
    return 0;
}
