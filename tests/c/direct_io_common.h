/* What the O_DIRECT clients (preload_direct_io.c, preload_async_io.c)
 * share: the test file, whose byte o holds pattern(o), and the pager
 * threads that keep pages leaving DRAM while reads are in flight.
 * Included by one source file each, so its functions are static. */
#ifndef DIRECT_IO_COMMON_H
#define DIRECT_IO_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)
#define FILE_MIB 32
#define PAGER_MIB 64
#define PAGE 4096

static atomic_int stop;
static uint8_t pattern(size_t o) { return (uint8_t)(o * 7 + (o >> 12) * 13 + (o >> 20)); }

static void fail(const char *what) {
    printf("FAIL %s: %s\n", what, strerror(errno));
    fflush(stdout);
    _exit(1);
}

static void write_file(const char *path) {
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    if (fd < 0) fail("creating the file");
    static uint8_t chunk[MIB];
    for (size_t m = 0; m < FILE_MIB; m++) {
        for (size_t i = 0; i < MIB; i++) chunk[i] = pattern(m * MIB + i);
        if (write(fd, chunk, MIB) != (ssize_t)MIB) fail("writing the file");
    }
    if (fsync(fd) != 0) fail("fsync");
    close(fd);
}

static void *pager(void *arg) {
    uint8_t *region = arg;
    uint64_t x = (uint64_t)(uintptr_t)arg | 1;
    while (!atomic_load(&stop)) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t page = x % (PAGER_MIB * MIB / PAGE);
        region[page * PAGE + (x >> 40) % PAGE] += 1;
    }
    return NULL;
}

#endif
