/* A parent and two forked children page at the same time through the C API:
 * a region four times the budget is filled, the process forks twice, each
 * child rewrites the region with bytes of its own, and all three processes
 * then read every byte of it, four times over, at once, so that all three
 * pagers read and write back together. Under signal delivery the children
 * once inherited the parent's rings and took each other's completions: a
 * child read wrong bytes, hung, or stopped with "the slot's ring is
 * smaller than its buffers".
 * Prints "api_fork_concurrent: ok" and exits 0 on success. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tiermem.h"

#define MIB (1024UL * 1024UL)
#define REGION (64 * MIB)
#define ROUNDS 4

static uint8_t byte_at(size_t i, unsigned generation) {
    return (uint8_t)(i * 7 + (i >> 12) * 13 + generation * 41);
}

static void fill(uint8_t *p, unsigned generation) {
    for (size_t i = 0; i < REGION; i++) p[i] = byte_at(i, generation);
}

/* Reads every byte ROUNDS times; returns 0, or 1 after saying what differed. */
static int check(const uint8_t *p, unsigned generation, const char *who) {
    for (int round = 0; round < ROUNDS; round++) {
        for (size_t i = 0; i < REGION; i++) {
            if (p[i] != byte_at(i, generation)) {
                fprintf(stderr, "api_fork_concurrent: FAIL: %s: byte %zu is %u, not %u (round %d)\n",
                        who, i, p[i], byte_at(i, generation), round);
                return 1;
            }
        }
    }
    return 0;
}

static pid_t fork_child(uint8_t *p, unsigned generation, const char *who) {
    pid_t pid = fork();
    if (pid < 0) {
        perror("api_fork_concurrent: fork");
        exit(1);
    }
    if (pid == 0) {
        fill(p, generation);
        _exit(check(p, generation, who));
    }
    return pid;
}

static int child_failed(pid_t pid, const char *who) {
    int status;
    if (waitpid(pid, &status, 0) != pid) {
        perror("api_fork_concurrent: waitpid");
        return 1;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    fprintf(stderr, "api_fork_concurrent: FAIL: the %s ended with status %#x\n", who, status);
    return 1;
}

int main(int argc, char **argv) {
    struct tm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.dram_budget = 16 * MIB;
    cfg.backing_path = argc > 1 ? argv[1] : "/var/tmp";
    if (tm_init(&cfg) != 0) {
        fprintf(stderr, "api_fork_concurrent: FAIL: tm_init: %s\n", tm_last_error());
        return 1;
    }
    uint8_t *p = tm_alloc(REGION);
    if (!p) {
        fprintf(stderr, "api_fork_concurrent: FAIL: tm_alloc: %s\n", tm_last_error());
        return 1;
    }
    fill(p, 1);
    pid_t first = fork_child(p, 2, "first child");
    pid_t second = fork_child(p, 3, "second child");
    int failed = check(p, 1, "parent");
    failed |= child_failed(first, "first child");
    failed |= child_failed(second, "second child");
    if (failed) return 1;
    printf("api_fork_concurrent: ok\n");
    return 0;
}
