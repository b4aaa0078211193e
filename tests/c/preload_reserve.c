/* Memory reserved PROT_NONE and committed later, as QEMU reserves guest
 * RAM and a JVM its heap. Meant to run under `tiermem run --dram 16M`.
 *
 * A 96 MiB PROT_NONE reservation: the first third is committed with
 * mprotect(PROT_READ|PROT_WRITE), the second with mmap(MAP_FIXED) of
 * fresh anonymous memory, the last stays reserved and must fault
 * (SIGSEGV) when touched. A second reservation is committed QEMU's way:
 * MAP_FIXED at an aligned address inside it, the head and tail unmapped.
 * MAP_FIXED_NOREPLACE over committed memory must fail with EEXIST and
 * leave it intact. Each committed byte is written three rounds over with
 * incompressible data (64 MiB and more in a 16 MiB budget: pages leave DRAM
 * for the store), then every byte is checked. Prints
 * "OK ..." and exits 0, or "FAIL ..." and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#define MIB (1024UL * 1024UL)
#define PAGE 4096UL

/* Bytes a compressor cannot shrink (a splitmix64 hash of the word index and
 * round), so pages that leave DRAM reach the store rather than staying in
 * the compressed tier, and --stats shows page-outs. */
static uint8_t pattern(size_t i, unsigned round) {
    uint64_t z = (uint64_t)(i >> 3) * 0x9e3779b97f4a7c15ULL + round;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (uint8_t)(z >> ((i & 7) * 8));
}

static sigjmp_buf fault_jump;
static void on_segv(int sig) { (void)sig; siglongjmp(fault_jump, 1); }

/* Whether reading *p raises SIGSEGV. */
static int faults(volatile uint8_t *p) {
    struct sigaction sa = {0}, old;
    sa.sa_handler = on_segv;
    sigaction(SIGSEGV, &sa, &old);
    int faulted = 0;
    if (sigsetjmp(fault_jump, 1) == 0)
        (void)*p;
    else
        faulted = 1;
    sigaction(SIGSEGV, &old, NULL);
    return faulted;
}

static int fill_and_check(uint8_t *p, size_t len, const char *what) {
    for (unsigned round = 0; round < 3; round++)
        for (size_t i = 0; i < len; i++) p[i] = pattern(i, round);
    for (size_t i = 0; i < len; i++)
        if (p[i] != pattern(i, 2)) {
            printf("FAIL %s: byte %zu is %02x, expected %02x\n", what, i, p[i], pattern(i, 2));
            return 1;
        }
    return 0;
}

int main(void) {
    size_t third = 32 * MIB;
    uint8_t *r = mmap(NULL, 3 * third, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) { perror("mmap reserve"); return 1; }
    if (!faults(r)) { printf("FAIL a fresh PROT_NONE reservation is readable\n"); return 1; }
    if (mprotect(r, third, PROT_READ | PROT_WRITE) != 0) { perror("mprotect"); return 1; }
    uint8_t *m = mmap(r + third, third, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (m != r + third) { printf("FAIL MAP_FIXED into the reservation\n"); return 1; }
    if (r[0] != 0 || m[0] != 0 || m[third - 1] != 0) { printf("FAIL committed memory is not zero\n"); return 1; }
    if (fill_and_check(r, 2 * third, "committed reservation")) return 1;
    if (!faults(r + 2 * third)) { printf("FAIL the reserved third is readable\n"); return 1; }
    if (!faults(r + 3 * third - PAGE)) { printf("FAIL the reservation's last page is readable\n"); return 1; }

    /* QEMU: reserve size + alignment, map at the aligned address, unmap
     * the head and all of the tail but a guard page. */
    size_t size = 24 * MIB, align = 2 * MIB;
    uint8_t *g = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g == MAP_FAILED) { perror("mmap guest reserve"); return 1; }
    uint8_t *ram = (uint8_t *)(((uintptr_t)g + align - 1) & ~(uintptr_t)(align - 1));
    if (mmap(ram, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) != ram) {
        printf("FAIL MAP_FIXED of guest RAM\n");
        return 1;
    }
    if (ram > g && munmap(g, (size_t)(ram - g)) != 0) { perror("munmap head"); return 1; }
    size_t tail = (size_t)(g + size + align - (ram + size));
    if (tail > PAGE && munmap(ram + size + PAGE, tail - PAGE) != 0) { perror("munmap tail"); return 1; }
    if (!faults(ram + size)) { printf("FAIL the guard page is readable\n"); return 1; }
    if (fill_and_check(ram, size, "guest RAM")) return 1;
    if (fill_and_check(r, 2 * third, "committed reservation, again")) return 1;
    /* The kernel refuses MAP_FIXED_NOREPLACE over a mapping; so must
     * tiermem over memory in use, and the memory must keep its bytes. */
    void *over = mmap(r + PAGE, 16 * PAGE, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (over != MAP_FAILED || errno != EEXIST) {
        printf("FAIL MAP_FIXED_NOREPLACE over committed memory gave %p, errno %d (want EEXIST)\n", over, errno);
        return 1;
    }
    for (size_t i = 0; i < 2 * third; i++)
        if (r[i] != pattern(i, 2)) { printf("FAIL byte %zu changed by a refused MAP_FIXED_NOREPLACE\n", i); return 1; }
    printf("OK %zu MiB committed from PROT_NONE reservations, every byte checked\n", (2 * third + size) / MIB);
    return 0;
}
