/* A forked child keeps nothing of its parent's pager threads: the rings of
 * the parent's handlers and evictor and the evictor's pidfd are closed in
 * the child, and the rings' queues unmapped, so each generation holds as
 * many as the first. Meant to run under `tiermem run --dram 16M`.
 *
 * The first process fills a 48 MiB region (three times the budget), then
 * forks a chain of GENERATIONS children, each the child of the one before;
 * each checks every byte of the region, counts its io_uring and pidfd
 * descriptors and its io_uring mappings, and passes them down by its exit
 * status. Before, each generation kept four more descriptors and the
 * parent's rings alive.
 *
 * Without tiermem every count is zero, and stays so.
 *
 * Prints "OK ..." and exits 0, or "FAIL ..." and exits 1. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB (1024UL * 1024UL)
#define REGION (48 * MIB)
#define GENERATIONS 4

struct counts {
    int rings, pidfds, ring_maps;
};

static uint8_t byte_at(size_t i) { return (uint8_t)(i * 7 + (i >> 12) * 13 + 5); }

static struct counts count_own(void) {
    struct counts c = {0, 0, 0};
    DIR *dir = opendir("/proc/self/fd");
    if (!dir) {
        printf("FAIL opendir /proc/self/fd\n");
        exit(1);
    }
    struct dirent *e;
    char path[300], target[256];
    while ((e = readdir(dir))) {
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n <= 0) continue;
        target[n] = 0;
        c.rings += strcmp(target, "anon_inode:[io_uring]") == 0;
        c.pidfds += strcmp(target, "anon_inode:[pidfd]") == 0;
    }
    closedir(dir);
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[512];
    while (maps && fgets(line, sizeof line, maps)) c.ring_maps += strstr(line, "anon_inode:[io_uring]") != NULL;
    if (maps) fclose(maps);
    return c;
}

static int same(struct counts a, struct counts b) {
    return a.rings == b.rings && a.pidfds == b.pidfds && a.ring_maps == b.ring_maps;
}

int main(void) {
    uint8_t *p = malloc(REGION);
    if (!p) {
        printf("FAIL malloc\n");
        return 1;
    }
    for (size_t i = 0; i < REGION; i++) p[i] = byte_at(i);
    struct counts first = count_own();
    const char *preload = getenv("LD_PRELOAD");
    if (preload && strstr(preload, "tiermem") && first.rings == 0) {
        printf("FAIL no io_uring descriptor in the first process under tiermem\n");
        return 1;
    }
    for (int generation = 1; generation <= GENERATIONS; generation++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) {
            printf("FAIL fork of generation %d\n", generation);
            return 1;
        }
        if (pid > 0) {
            int status;
            if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
                printf("FAIL generation %d did not exit\n", generation);
                return 1;
            }
            return WEXITSTATUS(status);
        }
        for (size_t i = 0; i < REGION; i++) {
            if (p[i] != byte_at(i)) {
                printf("FAIL generation %d: byte %zu is %u, not %u\n", generation, i, p[i], byte_at(i));
                return 1;
            }
        }
        struct counts now = count_own();
        if (!same(now, first)) {
            printf("FAIL generation %d holds %d rings, %d pidfds and %d ring mappings; the first "
                   "process %d, %d and %d\n",
                   generation, now.rings, now.pidfds, now.ring_maps, first.rings, first.pidfds,
                   first.ring_maps);
            return 1;
        }
    }
    printf("OK %d generations, each with %d rings, %d pidfds and %d ring mappings\n", GENERATIONS,
           first.rings, first.pidfds, first.ring_maps);
    return 0;
}
