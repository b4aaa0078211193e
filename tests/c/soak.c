/* A soak of the C API: threads, forks, budget changes and (through the
 * environment) injected I/O faults, all at once, every byte checked.
 *
 * - THREADS threads each own a REGION_MIB MiB region from tm_alloc (the
 *   whole is four times the starting budget). Each picks a random page,
 *   checks every byte of it against the generation it last wrote there,
 *   and rewrites it with the next generation.
 * - Every 2 s the main thread forks (the workers pause at a page boundary,
 *   so the child sees every page whole). The child checks every byte of
 *   every region against its copy of the generations; every second child
 *   first forks a grandchild that does the same (a fork from a forked
 *   child).
 * - Every second the budget moves to a random size between an eighth and
 *   a half of the regions (tm_set_dram_budget).
 * - TIERMEM_INJECT_FAULTS, if set, makes reads and writes fail: single
 *   failures must be survived with every byte right.
 *
 * Usage: soak SECONDS [BACKING_DIR]
 * Prints a progress line every 10 s, then "soak: ok ..." and exits 0;
 * any wrong byte, failed child or error prints "soak: FAIL ..." and
 * exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tiermem.h"

#define MIB ((size_t)1 << 20)
#define PAGE 4096
#define THREADS 3
#define REGION_MIB 32
#define PAGES (REGION_MIB * MIB / PAGE)
#define BUDGET_START (THREADS * REGION_MIB * MIB / 4)

static uint8_t *regions[THREADS];
static uint32_t *generation[THREADS]; /* plain malloc: not tiered here */
static pthread_rwlock_t fork_lock; /* writer-preferring: the forker must get in */
static atomic_int stop;
static atomic_ullong checked_pages;

#define FAIL(...)                                                                      \
    do {                                                                               \
        printf("soak: FAIL (pid %d): ", getpid());                                     \
        printf(__VA_ARGS__);                                                           \
        printf(" (last error: %s)\n", tm_last_error());                                \
        fflush(stdout);                                                                \
        _exit(1);                                                                      \
    } while (0)

static uint8_t byte_at(int t, size_t page, uint32_t gen, size_t i) {
    return (uint8_t)(page * 131 + i * 7 + (i >> 9) + gen * 29 + (size_t)t * 53);
}

static void check_page(int t, size_t page) {
    const uint8_t *p = regions[t] + page * PAGE;
    uint32_t gen = generation[t][page];
    for (size_t i = 0; i < PAGE; i++)
        if (p[i] != byte_at(t, page, gen, i))
            FAIL("thread %d page %zu byte %zu is %02x, expected %02x (generation %u)", t, page, i,
                 p[i], byte_at(t, page, gen, i), gen);
}

static void write_page(int t, size_t page, uint32_t gen) {
    uint8_t *p = regions[t] + page * PAGE;
    for (size_t i = 0; i < PAGE; i++) p[i] = byte_at(t, page, gen, i);
    generation[t][page] = gen;
}

static void check_everything(void) {
    for (int t = 0; t < THREADS; t++)
        for (size_t page = 0; page < PAGES; page++) check_page(t, page);
}

static void *worker(void *arg) {
    int t = (int)(intptr_t)arg;
    uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(t + 1);
    while (!atomic_load(&stop)) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t page = x % PAGES;
        pthread_rwlock_rdlock(&fork_lock);
        check_page(t, page);
        write_page(t, page, generation[t][page] + 1);
        pthread_rwlock_unlock(&fork_lock);
        atomic_fetch_add(&checked_pages, 1);
    }
    return NULL;
}

/* In a child: check everything, maybe through a grandchild first. */
static void child(int with_grandchild) {
    if (with_grandchild) {
        pid_t g = fork();
        if (g < 0) FAIL("fork in a child: %s", strerror(errno));
        if (g == 0) {
            check_everything();
            _exit(0);
        }
        int status = 0;
        if (waitpid(g, &status, 0) != g || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            FAIL("a grandchild failed (status %#x)", status);
    }
    check_everything();
    _exit(0);
}

static size_t reap(int block, size_t *failed) {
    size_t reaped = 0;
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, block ? 0 : WNOHANG)) > 0) {
        reaped++;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) (*failed)++;
    }
    return reaped;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    int seconds = argc > 1 ? atoi(argv[1]) : 30;
    struct tm_config cfg = {0};
    cfg.dram_budget = BUDGET_START;
    cfg.backing_path = argc > 2 ? argv[2] : "/var/tmp";
    if (tm_init(&cfg) != 0) FAIL("tm_init");
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    if (pthread_rwlock_init(&fork_lock, &attr) != 0) FAIL("pthread_rwlock_init");
    for (int t = 0; t < THREADS; t++) {
        regions[t] = tm_alloc(REGION_MIB * MIB);
        generation[t] = calloc(PAGES, sizeof(uint32_t));
        if (!regions[t] || !generation[t]) FAIL("allocating region %d", t);
        for (size_t page = 0; page < PAGES; page++) write_page(t, page, 0);
    }
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++)
        if (pthread_create(&threads[t], NULL, worker, (void *)(intptr_t)t) != 0)
            FAIL("pthread_create");

    double start = now(), next_fork = start + 2, next_budget = start + 1, next_report = start + 10;
    size_t forks = 0, children = 0, failed = 0, budget_changes = 0;
    uint64_t x = 0x2545F4914F6CDD1Dull;
    while (now() - start < seconds) {
        usleep(50 * 1000);
        double t = now();
        if (t >= next_budget) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t total = THREADS * REGION_MIB * MIB;
            size_t budget = total / 8 + x % (total / 2 - total / 8);
            if (tm_set_dram_budget(budget & ~(size_t)(PAGE - 1)) != 0) FAIL("tm_set_dram_budget");
            budget_changes++;
            next_budget = t + 1;
        }
        if (t >= next_fork) {
            pthread_rwlock_wrlock(&fork_lock);
            fflush(stdout);
            pid_t pid = fork();
            if (pid == 0) child(forks % 2 == 1);
            pthread_rwlock_unlock(&fork_lock);
            if (pid < 0) FAIL("fork: %s", strerror(errno));
            forks++;
            next_fork = t + 2;
        }
        children += reap(0, &failed);
        if (failed) FAIL("%zu child(ren) found wrong bytes or failed", failed);
        if (t >= next_report) {
            printf("soak: %.0f s, %llu pages checked, %zu forks, %zu budget changes\n", t - start,
                   (unsigned long long)atomic_load(&checked_pages), forks, budget_changes);
            fflush(stdout);
            next_report = t + 10;
        }
    }
    atomic_store(&stop, 1);
    for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
    children += reap(1, &failed);
    if (failed) FAIL("%zu child(ren) found wrong bytes or failed", failed);
    check_everything();
    struct tm_stats s;
    if (tm_stats(&s) != 0) FAIL("tm_stats");
    printf("soak: ok %d s, %llu pages checked (every byte), final check of %zu pages, %zu forks "
           "(%zu children and %zu grandchildren checked everything), %zu budget changes, "
           "%llu page-ins, %llu page-outs, %llu I/O errors survived, %llu pages lost\n",
           seconds, (unsigned long long)atomic_load(&checked_pages), (size_t)THREADS * PAGES, forks,
           children, forks / 2, budget_changes, (unsigned long long)s.page_ins,
           (unsigned long long)s.page_outs, (unsigned long long)s.io_errors,
           (unsigned long long)s.poisoned_pages);
    return 0;
}
