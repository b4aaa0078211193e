/* fork handlers of the program's own that touch tiered memory while the
 * fork runs: registered before tm_init, its prepare handler runs after
 * tiermem's and its parent and child handlers before tiermem's, that is,
 * while tiermem's pager is paused for the fork. Each reads every byte of a
 * region four times the budget, most of it evicted. Under signal delivery
 * the forking thread resolves those faults itself, past the gate that holds
 * other threads' faults back during a fork; it waited at that gate forever.
 * Prints "api_fork_atfork: ok" and exits 0 on success. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tiermem.h"

#define MIB (1024UL * 1024UL)
#define REGION (64 * MIB)

static uint8_t *region;
static size_t wrong_in_prepare, wrong_in_parent, wrong_in_child;

static uint8_t byte_at(size_t i) { return (uint8_t)(i * 7 + (i >> 12) * 13 + 3); }

static size_t differing(void) {
    size_t bad = 0;
    if (!region) return 0;
    for (size_t i = 0; i < REGION; i++) bad += region[i] != byte_at(i);
    return bad;
}

static void prepare(void) { wrong_in_prepare = differing(); }
static void parent(void) { wrong_in_parent = differing(); }
static void child(void) { wrong_in_child = differing(); }

int main(int argc, char **argv) {
    if (pthread_atfork(prepare, parent, child) != 0) {
        fprintf(stderr, "api_fork_atfork: FAIL: pthread_atfork\n");
        return 1;
    }
    struct tm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.dram_budget = 16 * MIB;
    cfg.backing_path = argc > 1 ? argv[1] : "/var/tmp";
    if (tm_init(&cfg) != 0) {
        fprintf(stderr, "api_fork_atfork: FAIL: tm_init: %s\n", tm_last_error());
        return 1;
    }
    uint8_t *p = tm_alloc(REGION);
    if (!p) {
        fprintf(stderr, "api_fork_atfork: FAIL: tm_alloc: %s\n", tm_last_error());
        return 1;
    }
    for (size_t i = 0; i < REGION; i++) p[i] = byte_at(i);
    region = p;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("api_fork_atfork: fork");
        return 1;
    }
    if (pid == 0) _exit(wrong_in_child != 0 || differing() != 0);
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "api_fork_atfork: FAIL: the child found wrong bytes or did not exit (%#x)\n",
                status);
        return 1;
    }
    if (wrong_in_prepare || wrong_in_parent || differing()) {
        fprintf(stderr, "api_fork_atfork: FAIL: %zu wrong bytes in the prepare handler, %zu in the parent's\n",
                wrong_in_prepare, wrong_in_parent);
        return 1;
    }
    printf("api_fork_atfork: ok\n");
    return 0;
}
