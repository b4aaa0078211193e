/*
 * What one TLB shootdown costs the CPU that receives it.
 *
 * Evicting a dirty page write-protects it first (UFFDIO_WRITEPROTECT), and
 * every such call flushes the TLB of each CPU running the program: on a
 * guest that is an inter-processor interrupt. This program measures what
 * those interrupts take from a thread that is busy on the other CPU.
 *
 * A worker pinned to CPU 0 counts loop iterations for 3 s. A flusher
 * pinned to CPU 1, in the same address space, write-protects one page
 * with mprotect(PROT_READ) RATE times a second (and unprotects it, which
 * needs no flush), spinning between calls so that both CPUs stay busy in
 * every run. RATE -1 spins without flushing: the baseline.
 *
 *   cc -O2 -pthread docs/perf/tlb_shootdown_cost.c -o tlb_shootdown_cost
 *   for r in -1 5000 -1 10000 -1 20000; do ./tlb_shootdown_cost $r; done
 *
 * The worker's loss divided by the flushes is the cost per shootdown; the
 * flusher's mean mprotect time is the sender's. The figures of the 2-vCPU
 * guest are in docs/notebook/benchmarks-random-access-passes.md, "Issue #4,
 * twelfth pass".
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define RUN_SECONDS 3.0

static atomic_int stop;
static char *page;
static long rate;
static long flushes;
static double seconds_in_mprotect;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set);
}

static void *flusher(void *unused)
{
    (void)unused;
    if (pin(1) != 0) {
        perror("pinning the flusher to CPU 1");
        exit(1);
    }
    double start = now();
    long done = 0;
    while (!atomic_load(&stop)) {
        if (rate < 0)
            continue;
        double due = start + (double)done / rate;
        while (now() < due && !atomic_load(&stop))
            ;
        double t = now();
        page[0]++;
        if (mprotect(page, 4096, PROT_READ) != 0) {
            perror("mprotect");
            exit(1);
        }
        seconds_in_mprotect += now() - t;
        mprotect(page, 4096, PROT_READ | PROT_WRITE);
        done++;
    }
    flushes = done;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s RATE   (write-protections per second; -1: none)\n", argv[0]);
        return 2;
    }
    rate = atol(argv[1]);
    if (rate == 0) {
        fprintf(stderr, "RATE must be -1 or a positive rate\n");
        return 2;
    }
    page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    page[0] = 1;
    if (pin(0) != 0) {
        perror("pinning the worker to CPU 0 (needs two CPUs)");
        return 1;
    }
    pthread_t thread;
    if (pthread_create(&thread, NULL, flusher, NULL) != 0) {
        fprintf(stderr, "cannot start the flusher\n");
        return 1;
    }
    volatile long sink = 0;
    long rounds = 0;
    double start = now();
    while (now() - start < RUN_SECONDS) {
        for (int i = 0; i < 1000; i++)
            sink += i;
        rounds++;
    }
    atomic_store(&stop, 1);
    pthread_join(thread, NULL);
    printf("rate %ld: worker %.1f M iterations/s, %ld flushes, sender %.2f us per mprotect\n",
           rate, rounds / RUN_SECONDS / 1e3, flushes,
           flushes ? seconds_in_mprotect / flushes * 1e6 : 0.0);
    return 0;
}
