/* Discards tiered memory with its own madvise system call, made with the
 * syscall instruction as Go's runtime makes it, so no interposer sees it.
 * Meant to run under `tiermem run --dram 16M`.
 *
 * Region A (SIZE_MIB, the first argument) is stamped and checked by the
 * main thread, which pages it through the budget again and again. Region B
 * (also SIZE_MIB) is stamped, and a second thread discards random 64 KiB
 * pieces of it with MADV_DONTNEED the whole time, so that the evictor
 * meets pages whose mapping the kernel removed. After each round every
 * page of B reads either its stamp or zeros (zeros if it was mapped when
 * discarded; a page out of DRAM keeps its stamp), and every page of A its
 * stamp, every byte. Then B is stamped afresh and checked exactly.
 * Prints "OK ..." and exits 0, or "FAIL ..." and exits 1. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MIB (1024UL * 1024UL)
#define PAGE 4096UL
#define PIECE (64 * 1024UL)
#define ROUNDS 4

static size_t len;
static uint8_t *b_region;
static atomic_int discarding = 1;
static atomic_long discards;

/* madvise(2) by the syscall instruction: x86-64 system call 28. */
static long raw_madvise(void *addr, size_t length, long advice) {
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(28L), "D"(addr), "S"(length), "d"(advice)
                     : "rcx", "r11", "memory");
    return ret;
}

static uint8_t stamp(size_t i, unsigned gen) {
    return (uint8_t)(i * 31 + (i >> 12) * 7 + gen * 101 + 1);
}

static void fill(uint8_t *p, unsigned gen) {
    for (size_t i = 0; i < len; i++) p[i] = stamp(i, gen);
}

static void check_exact(const uint8_t *p, unsigned gen, const char *what) {
    for (size_t i = 0; i < len; i++)
        if (p[i] != stamp(i, gen)) {
            printf("FAIL: %s byte %zu is %02x, expected %02x\n", what, i, p[i], stamp(i, gen));
            exit(1);
        }
}

/* Each page of B is its stamp or all zeros, nothing else. */
static void check_stamp_or_zero(const uint8_t *p, unsigned gen, long *zeroed) {
    for (size_t page = 0; page < len; page += PAGE) {
        int zero = 1, stamped = 1;
        for (size_t i = page; i < page + PAGE; i++) {
            zero &= p[i] == 0;
            stamped &= p[i] == stamp(i, gen);
        }
        if (!zero && !stamped) {
            printf("FAIL: region B page at byte %zu is neither its stamp nor zeros\n", page);
            exit(1);
        }
        *zeroed += zero;
    }
}

static void *discarder(void *arg) {
    (void)arg;
    unsigned seed = 12345;
    while (atomic_load(&discarding)) {
        size_t piece = (size_t)rand_r(&seed) % (len / PIECE);
        if (raw_madvise(b_region + piece * PIECE, PIECE, MADV_DONTNEED) != 0) {
            printf("FAIL: raw madvise\n");
            exit(1);
        }
        atomic_fetch_add(&discards, 1);
        if (piece % 8 == 0) usleep(50);
    }
    return NULL;
}

int main(int argc, char **argv) {
    len = (argc > 1 ? strtoul(argv[1], NULL, 10) : 48) * MIB;
    uint8_t *a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    b_region = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED || b_region == MAP_FAILED) {
        printf("FAIL: mmap\n");
        return 1;
    }
    long zeroed = 0;
    for (unsigned round = 1; round <= ROUNDS; round++) {
        fill(a, round);
        fill(b_region, round + 100);
        atomic_store(&discarding, 1);
        pthread_t t;
        if (pthread_create(&t, NULL, discarder, NULL)) {
            printf("FAIL: pthread_create\n");
            return 1;
        }
        for (int pass = 0; pass < 3; pass++) check_exact(a, round, "region A");
        atomic_store(&discarding, 0);
        pthread_join(t, NULL);
        check_stamp_or_zero(b_region, round + 100, &zeroed);
        fill(b_region, round + 200);
        check_exact(a, round, "region A after B was stamped again");
        check_exact(b_region, round + 200, "region B stamped again");
    }
    printf("OK: %d rounds, %ld raw discards, %ld pages of B read zeros\n", ROUNDS,
           atomic_load(&discards), zeroed);
    return 0;
}
