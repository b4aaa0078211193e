/* Ends without running its exit handlers, as Go programs do: after paging
 * SIZE_MIB (the first argument) of incompressible words and checking each,
 * HOW (the second argument) is "exit_group" (the system call itself),
 * "kill" (SIGKILL to itself) or "exit" (exit(3), which runs them).
 * Prints "OK ..." before it ends, or "FAIL ..." and exits 1. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MIB (1024UL * 1024UL)

/* splitmix64's finaliser: a word that depends on every bit of its index. */
static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

int main(int argc, char **argv) {
    size_t len = (argc > 1 ? strtoul(argv[1], NULL, 10) : 64) * MIB;
    const char *how = argc > 2 ? argv[2] : "exit_group";
    uint8_t *p = malloc(len);
    if (!p) {
        printf("FAIL: malloc\n");
        return 1;
    }
    /* Incompressible words, so that pages reach the store and not only
     * the compressed pool. */
    uint64_t *w = (uint64_t *)p;
    size_t words = len / sizeof *w;
    for (size_t i = 0; i < words; i++) w[i] = mix(i);
    for (size_t i = 0; i < words; i++)
        if (w[i] != mix(i)) {
            printf("FAIL: word %zu\n", i);
            return 1;
        }
    /* Long enough for tiermem run to take the statistics at least once. */
    usleep(300 * 1000);
    printf("OK: %zu MiB checked, ending by %s\n", len / MIB, how);
    fflush(stdout);
    if (!strcmp(how, "exit_group")) syscall(SYS_exit_group, 0);
    if (!strcmp(how, "kill")) raise(SIGKILL);
    exit(0);
}
