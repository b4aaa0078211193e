/* A program that has opened every file descriptor it may forks, and its
 * child forks again: both descendants read their evicted memory back, as
 * without tiermem, where a fork needs no descriptor. Meant to run under
 * `tiermem run --dram 8M`.
 *
 * A SIZE_MIB region (the first argument) is stamped and paged through the
 * budget. The descriptor limit is lowered to 256 and /dev/null opened until
 * EMFILE. Then the program forks; the child checks every byte of the
 * region, forks a grandchild that checks it again and writes a stamp of
 * its own over it and checks that, and exits with the grandchild's
 * verdict. The parent checks the region last, every byte.
 * Prints "OK ..." and exits 0, or "FAIL ..." and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB (1024UL * 1024UL)

static uint8_t *region;
static size_t len;

static uint8_t stamp(size_t i, unsigned gen) {
    return (uint8_t)(i * 31 + (i >> 12) * 7 + gen * 101 + 1);
}

static void fill(unsigned gen) {
    for (size_t i = 0; i < len; i++) region[i] = stamp(i, gen);
}

/* 0 when every byte holds its stamp of `gen`; otherwise says where not. */
static int check(unsigned gen, const char *who) {
    for (size_t i = 0; i < len; i++)
        if (region[i] != stamp(i, gen)) {
            printf("FAIL %s: byte %zu reads %u, not %u\n", who, i, region[i], stamp(i, gen));
            fflush(stdout);
            return 1;
        }
    return 0;
}

/* Forks `body` and returns its exit status, or 1 if it died. */
static int in_child(int (*body)(void)) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        printf("FAIL fork: %s\n", strerror(errno));
        return 1;
    }
    if (pid == 0) _exit(body());
    int status;
    if (waitpid(pid, &status, 0) != pid) return 1;
    if (!WIFEXITED(status)) {
        printf("FAIL a child died of signal %d\n", WTERMSIG(status));
        return 1;
    }
    return WEXITSTATUS(status);
}

static int grandchild(void) {
    if (check(1, "grandchild")) return 1;
    fill(2);
    return check(2, "grandchild, its own stamp");
}

static int child(void) {
    if (check(1, "child")) return 1;
    return in_child(grandchild);
}

int main(int argc, char **argv) {
    len = (argc > 1 ? strtoul(argv[1], NULL, 10) : 32) * MIB;
    region = malloc(len);
    if (!region) {
        printf("FAIL malloc\n");
        return 1;
    }
    fill(1);
    if (check(1, "parent before the fork")) return 1;

    struct rlimit lim = {.rlim_cur = 256, .rlim_max = 256};
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0) {
        printf("FAIL setrlimit: %s\n", strerror(errno));
        return 1;
    }
    unsigned opened = 0;
    while (open("/dev/null", O_RDONLY) >= 0) opened++;
    if (errno != EMFILE) {
        printf("FAIL open stopped with %s, not EMFILE\n", strerror(errno));
        return 1;
    }
    if (in_child(child)) return 1;
    if (check(1, "parent after its children")) return 1;
    printf("OK a child and a grandchild forked with no descriptor free (%u opened) read %zu MiB back\n",
           opened, len / MIB);
    return 0;
}
