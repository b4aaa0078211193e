/* A long-lived forked child must not make its parent's store grow without
 * bound (C API, no preload).
 *
 * The parent fills a region four times the budget, forks a child that
 * waits, then rewrites the whole region PASSES times: every pass frees
 * the slots of the previous one. The child holds only the slots in use at
 * its fork, so the parent's store stays within about twice the region
 * (before per-child holds, every freed slot stayed parked while the child
 * lived: PASSES + 1 regions). The child then checks every byte it saw at
 * the fork, rewrites its copy (letting go of the parent's slots), and the
 * parent's parked space drops to zero while the child still lives; a
 * second round of rewrites grows the store no further. Both sides check
 * every byte at the end.
 * Prints "api_fork_store: ok ..." and exits 0 on success. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tiermem.h"

#define MIB (1024UL * 1024UL)
#define PAGE 4096UL
#define REGION (32 * MIB)
#define PASSES 6
#define FAIL(...) do { fprintf(stderr, "api_fork_store: FAIL (pid %d): ", getpid()); fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (last error: %s)\n", tm_last_error()); _exit(1); } while (0)

static uint8_t byte_at(size_t offset, unsigned generation) {
    size_t page = offset / PAGE;
    return (uint8_t)(page * 131 + (offset % PAGE) * 7 + (offset >> 14) + generation * 29);
}

static void fill(uint8_t *p, unsigned generation) {
    for (size_t i = 0; i < REGION; i++) p[i] = byte_at(i, generation);
}

static void check(const uint8_t *p, unsigned generation, const char *who) {
    size_t bad = 0;
    for (size_t i = 0; i < REGION; i++) bad += p[i] != byte_at(i, generation);
    if (bad) FAIL("%s: %zu bytes differ from generation %u", who, bad, generation);
}

static struct tm_stats stats(void) {
    struct tm_stats st;
    if (tm_stats(&st) != 0) FAIL("tm_stats");
    return st;
}

static void send_byte(int fd, char c) {
    if (write(fd, &c, 1) != 1) FAIL("write to pipe");
}

static char receive_byte(int fd) {
    char c = 0;
    if (read(fd, &c, 1) != 1) FAIL("read from pipe");
    return c;
}

/* Waits for each command of the parent: 'c' check the fork's bytes,
 * 'r' rewrite them, 'x' check the rewrite and exit. Answers each. */
static void child(uint8_t *p, int commands, int answers) {
    for (;;) {
        char c = receive_byte(commands);
        if (c == 'c') check(p, 1, "child at fork");
        else if (c == 'r') fill(p, 3);
        else if (c == 'x') {
            check(p, 3, "child after its rewrite");
            _exit(0);
        }
        send_byte(answers, c);
    }
}

static void rewrite_passes(uint8_t *p, unsigned first_generation) {
    for (unsigned g = 0; g < PASSES; g++) fill(p, first_generation + g);
}

/* The parked space after the evictor has looked again (every 100 ms). */
static uint64_t parked_after_review(void) {
    uint64_t parked = 0;
    for (int i = 0; i < 50; i++) {
        usleep(20000);
        parked = stats().parked_bytes;
        if (parked == 0) break;
    }
    return parked;
}

int main(int argc, char **argv) {
    struct tm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.dram_budget = REGION / 4;
    cfg.backing_path = argc > 1 ? argv[1] : "/var/tmp";
    if (tm_init(&cfg) != 0) FAIL("tm_init");
    uint8_t *p = tm_alloc(REGION);
    if (!p) FAIL("tm_alloc");
    fill(p, 1);
    int to_child[2], to_parent[2];
    if (pipe(to_child) != 0 || pipe(to_parent) != 0) FAIL("pipe");
    uint64_t at_fork = stats().backing_bytes;
    pid_t pid = fork();
    if (pid < 0) FAIL("fork");
    if (pid == 0) child(p, to_child[0], to_parent[1]);

    rewrite_passes(p, 10);
    struct tm_stats st = stats();
    uint64_t after_passes = st.backing_bytes;
    if (after_passes > at_fork + REGION + REGION / 2)
        FAIL("the store grew from %llu to %llu MiB over %d rewrites of a %lu MiB region while "
             "a child lived: freed slots the child never read stay parked",
             (unsigned long long)(at_fork / MIB), (unsigned long long)(after_passes / MIB), PASSES,
             REGION / MIB);
    if (st.parked_bytes == 0) FAIL("nothing parked: the child's slots were reused");

    send_byte(to_child[1], 'c');
    receive_byte(to_parent[0]);
    send_byte(to_child[1], 'r');
    receive_byte(to_parent[0]);
    uint64_t parked = parked_after_review();
    if (parked != 0)
        FAIL("%llu KiB stay parked after the child rewrote all of its memory",
             (unsigned long long)(parked / 1024));

    rewrite_passes(p, 20);
    uint64_t after_more = stats().backing_bytes;
    if (after_more > after_passes + REGION / 4)
        FAIL("the store grew from %llu to %llu MiB after the child let its slots go",
             (unsigned long long)(after_passes / MIB), (unsigned long long)(after_more / MIB));
    check(p, 20 + PASSES - 1, "parent");

    send_byte(to_child[1], 'x');
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        FAIL("the child failed (status %#x)", status);
    check(p, 20 + PASSES - 1, "parent after the child");
    printf("api_fork_store: ok (store %llu MiB at fork, %llu after %d rewrites, %llu after %d "
           "more; %llu page-outs)\n",
           (unsigned long long)(at_fork / MIB), (unsigned long long)(after_passes / MIB), PASSES,
           (unsigned long long)(after_more / MIB), PASSES,
           (unsigned long long)stats().page_outs);
    return 0;
}
