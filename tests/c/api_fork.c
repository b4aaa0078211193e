/* fork through the C API, outside `tiermem run`: a region four times the
 * budget is filled (every byte), then the process forks while a second
 * thread keeps faulting pages in; the child checks every byte of every
 * page, writes its own, forks a grandchild that checks the child's bytes,
 * and the parent checks that nothing of the child leaked into its memory.
 * HOW (the second argument) is "fork" (glibc's fork()), "_Fork" or
 * "sys_fork" (syscall(SYS_fork)): the last two run no atfork handlers, and
 * libtiermem.so wraps them.
 * Prints "api_fork: ok" and exits 0 on success. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tiermem.h"

#define MIB (1024UL * 1024UL)
#define PAGE 4096UL
#define REGION (64 * MIB)
#define FAIL(...) do { fprintf(stderr, "api_fork: FAIL: " __VA_ARGS__); fprintf(stderr, " (last error: %s)\n", tm_last_error()); _exit(1); } while (0)

static const char *how = "fork";

pid_t _Fork(void);

static pid_t fork_as_asked(void) {
    if (strcmp(how, "_Fork") == 0) return _Fork();
    if (strcmp(how, "sys_fork") == 0) return (pid_t)syscall(SYS_fork);
    return fork();
}

static uint8_t byte_at(size_t offset, unsigned generation) {
    size_t page = offset / PAGE;
    return (uint8_t)(page * 131 + (offset % PAGE) * 7 + (offset >> 14) + generation * 29);
}

static void fill(uint8_t *p, unsigned generation) {
    for (size_t i = 0; i < REGION; i++) p[i] = byte_at(i, generation);
}

/* Returns how many bytes differ from `generation`. */
static size_t differing(const uint8_t *p, unsigned generation) {
    size_t bad = 0;
    for (size_t i = 0; i < REGION; i++) bad += p[i] != byte_at(i, generation);
    return bad;
}

static atomic_int stop_toucher;

/* Reads pages all over the region while the main thread forks. */
static void *toucher(void *arg) {
    volatile const uint8_t *p = arg;
    size_t page = 7;
    unsigned sum = 0;
    while (!atomic_load(&stop_toucher)) {
        page = (page * 2654435761UL + 12345) % (REGION / PAGE);
        sum += p[page * PAGE + 1];
    }
    return (void *)(uintptr_t)sum;
}

static int wait_ok(pid_t pid, const char *who) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) FAIL("waitpid(%s)", who);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "api_fork: %s failed (status %#x)\n", who, status);
        return 0;
    }
    return 1;
}

static void child(uint8_t *p) {
    size_t bad = differing(p, 1);
    if (bad) FAIL("child: %zu bytes differ from the parent's at fork", bad);
    fill(p, 2);
    pid_t grandchild = fork_as_asked();
    if (grandchild < 0) FAIL("fork in the child");
    if (grandchild == 0) {
        bad = differing(p, 2);
        if (bad) FAIL("grandchild: %zu bytes differ from the child's", bad);
        _exit(0);
    }
    if (!wait_ok(grandchild, "grandchild")) _exit(1);
    bad = differing(p, 2);
    if (bad) FAIL("child after the grandchild: %zu bytes differ", bad);
    _exit(0);
}

int main(int argc, char **argv) {
    struct tm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.dram_budget = 16 * MIB;
    cfg.backing_path = argc > 1 ? argv[1] : "/var/tmp";
    if (argc > 2) how = argv[2];
    if (tm_init(&cfg) != 0) FAIL("tm_init");
    uint8_t *p = tm_alloc(REGION);
    if (!p) FAIL("tm_alloc");
    fill(p, 1);
    pthread_t thread;
    if (pthread_create(&thread, NULL, toucher, p) != 0) FAIL("pthread_create");
    usleep(20000);
    pid_t pid = fork_as_asked();
    if (pid < 0) FAIL("fork");
    if (pid == 0) child(p);
    atomic_store(&stop_toucher, 1);
    pthread_join(thread, NULL);
    if (!wait_ok(pid, "child")) return 1;
    size_t bad = differing(p, 1);
    if (bad) FAIL("parent after the child: %zu bytes differ", bad);
    struct tm_stats st;
    tm_stats(&st);
    if (st.page_outs == 0) FAIL("nothing was paged out: the region must exceed the budget");
    printf("api_fork: ok (%llu page-outs, %llu page-ins)\n", (unsigned long long)st.page_outs,
           (unsigned long long)st.page_ins);
    return 0;
}
