/* A real C client of signal fault delivery (tm_config.faults = "signal").
 * With "good": two threads stamp, rewrite and check 64 MiB in an 8 MiB
 * budget, resolving their own faults through SIGBUS; every page is then
 * verified, and a SIGBUS handler the program installed before tiermem still
 * gets the SIGBUS that is not tiermem's. With "bad": an unknown delivery is
 * refused with EINVAL and a message naming TIERMEM_FAULTS.
 * Prints "signal_client: ok" on success. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tiermem.h"

#define MIB (1024UL * 1024UL)
#define PAGE 4096UL
#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "signal_client: FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (last error: %s)\n", tm_last_error()); exit(1); } } while (0)

static uint64_t *region;
static const size_t pages = 64 * MIB / PAGE;

static uint64_t stamp(size_t page, uint64_t round) { return page * 2654435761u + round; }

struct part { size_t first, count; };

/* Each thread owns every other page: stamps round 1, then checks and
 * rewrites every page in a scattered order, twice. */
static void *worker(void *arg) {
    struct part *p = arg;
    uint64_t words = PAGE / 8;
    for (size_t i = p->first; i < pages; i += p->count) region[i * words] = stamp(i, 1);
    for (uint64_t round = 1; round < 3; round++)
        for (size_t k = 0; k < pages; k++) {
            size_t i = (k * 7919) % pages;
            if (i % p->count != p->first) continue;
            CHECK(region[i * words] == stamp(i, round), "page %zu round %lu", i, (unsigned long)round);
            region[i * words] = stamp(i, round + 1);
        }
    return NULL;
}

/* Threads of this process whose name starts with `prefix`. */
static int threads_named(const char *prefix) {
    DIR *tasks = opendir("/proc/self/task");
    CHECK(tasks != NULL, "opendir /proc/self/task");
    int n = 0;
    struct dirent *t;
    while ((t = readdir(tasks)) != NULL) {
        if (t->d_name[0] == '.') continue;
        char path[300], name[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", t->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL) continue;
        if (fgets(name, sizeof name, f) != NULL && strncmp(name, prefix, strlen(prefix)) == 0) n++;
        fclose(f);
    }
    closedir(tasks);
    return n;
}

static volatile sig_atomic_t foreign_sigbus;
static void on_foreign_sigbus(int sig) { (void)sig; foreign_sigbus++; }

static int good(const char *backing) {
    CHECK(signal(SIGBUS, on_foreign_sigbus) != SIG_ERR, "signal");
    struct tm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.dram_budget = 8 * MIB;
    cfg.backing_path = backing;
    cfg.faults = "signal";
    CHECK(tm_init(&cfg) == 0, "tm_init");
    region = tm_alloc(pages * PAGE);
    CHECK(region != NULL, "tm_alloc");
    pthread_t threads[2];
    struct part parts[2] = {{0, 2}, {1, 2}};
    for (int t = 0; t < 2; t++) CHECK(pthread_create(&threads[t], NULL, worker, &parts[t]) == 0, "pthread_create");
    for (int t = 0; t < 2; t++) pthread_join(threads[t], NULL);
    for (size_t i = 0; i < pages; i++) CHECK(region[i * (PAGE / 8)] == stamp(i, 3), "page %zu at the end", i);
    struct tm_stats st;
    CHECK(tm_stats(&st) == 0, "tm_stats");
    CHECK(st.page_ins > 0 && st.page_outs > 0, "no paging: %lu in, %lu out", (unsigned long)st.page_ins, (unsigned long)st.page_outs);
    CHECK(st.peak_resident_bytes <= 8 * MIB, "peak %lu", (unsigned long)st.peak_resident_bytes);
    /* Signal delivery really is on: the evictor runs, no fault handler does. */
    CHECK(threads_named("tiermem-evict") == 1, "the evictor thread is missing");
    CHECK(threads_named("tiermem-fault") == 0, "fault handler threads run under signal delivery");
    CHECK(raise(SIGBUS) == 0 && foreign_sigbus == 1, "the program's own SIGBUS handler ran %d times", (int)foreign_sigbus);
    tm_free(region);
    return 0;
}

static int bad(const char *backing) {
    struct tm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.dram_budget = 8 * MIB;
    cfg.backing_path = backing;
    cfg.faults = "sigsegv";
    errno = 0;
    CHECK(tm_init(&cfg) == -1 && errno == EINVAL, "an unknown delivery must fail with EINVAL, errno %d", errno);
    CHECK(strstr(tm_last_error(), "TIERMEM_FAULTS") != NULL, "message: %s", tm_last_error());
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "good";
    const char *backing = argc > 2 ? argv[2] : "/var/tmp";
    int rc = strcmp(mode, "bad") == 0 ? bad(backing) : good(backing);
    if (rc == 0) printf("signal_client: ok\n");
    return rc;
}
