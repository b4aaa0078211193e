/* O_DIRECT reads into tiered buffers while other threads page heavily.
 * Meant to run under `tiermem run --dram 8M`.
 *
 * The kernel pins a buffer's pages for the device's DMA. Were tiermem to
 * evict such a page mid-read, the read's bytes would land in a page that
 * nothing maps any more, and the buffer would come back with what it held
 * before the read. So every buffer is filled with 0xEE before each read,
 * and every byte is checked after it.
 *
 * The file: DIR/direct.dat (or PATH itself, when it names a file, such as
 * a slow disk nbdfuse exposes), FILE_MIB MiB, byte o = pattern(o). Buffers:
 * NBUF malloc'd (so tiered) buffers of READ_MIB MiB. Two threads write
 * random pages of a PAGER_MIB MiB region all along, so pages keep leaving
 * DRAM, the buffers' included.
 *
 * Usage: preload_direct_io DIR|PATH [SECONDS]   (default 8)
 * Prints "OK reads=N bytes=M" and exits 0, or "FAIL ..." and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "direct_io_common.h"

#define READ_MIB 2
#define NBUF 6

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("FAIL usage: preload_direct_io DIR [SECONDS]\n");
        return 1;
    }
    int seconds = argc > 2 ? atoi(argv[2]) : 8;
    char path[4096];
    struct stat st;
    int named_file = stat(argv[1], &st) == 0 && !S_ISDIR(st.st_mode);
    if (named_file)
        snprintf(path, sizeof path, "%s", argv[1]);
    else
        snprintf(path, sizeof path, "%s/direct.dat", argv[1]);
    write_file(path);
    int fd = open(path, O_RDONLY | O_DIRECT);
    if (fd < 0) fail("opening the file O_DIRECT");

    uint8_t *bufs[NBUF];
    for (int b = 0; b < NBUF; b++)
        if (posix_memalign((void **)&bufs[b], PAGE, READ_MIB * MIB) != 0) fail("posix_memalign");
    uint8_t *region = malloc(PAGER_MIB * MIB);
    if (!region) fail("malloc");
    memset(region, 1, PAGER_MIB * MIB);
    pthread_t threads[2];
    for (int t = 0; t < 2; t++)
        if (pthread_create(&threads[t], NULL, pager, region + t) != 0) fail("pthread_create");

    time_t end = time(NULL) + seconds;
    uint64_t x = 88172645463325252ull;
    size_t reads = 0, bytes = 0;
    while (time(NULL) < end) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint8_t *buf = bufs[reads % NBUF];
        size_t off = (x % ((FILE_MIB - READ_MIB) * MIB / PAGE)) * PAGE;
        memset(buf, 0xEE, READ_MIB * MIB);
        ssize_t n = pread(fd, buf, READ_MIB * MIB, (off_t)off);
        if (n != (ssize_t)(READ_MIB * MIB)) fail("pread");
        for (size_t i = 0; i < READ_MIB * MIB; i++) {
            if (buf[i] != pattern(off + i)) {
                printf("FAIL read %zu at file offset %zu: byte %zu is %02x, expected %02x\n", reads,
                       off, i, buf[i], pattern(off + i));
                fflush(stdout);
                _exit(1);
            }
        }
        reads++;
        bytes += READ_MIB * MIB;
    }
    atomic_store(&stop, 1);
    for (int t = 0; t < 2; t++) pthread_join(threads[t], NULL);
    close(fd);
    if (!named_file) unlink(path);
    printf("OK reads=%zu bytes=%zu\n", reads, bytes);
    return 0;
}
