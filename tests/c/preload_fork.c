/* fork without exec over tiered memory that is mostly evicted. Meant to run
 * under `tiermem run --dram 8M`.
 *
 * Data: MALLOC_MIB of 1 MiB malloc'd chunks plus one MMAP_MIB anonymous
 * private mapping. Every 4 KiB unit of every chunk holds words that encode
 * (generation, chunk, unit, word), so a wrong word says where it came from.
 *
 * Round 1: stamp generation 1; fork. The child checks every byte is
 *   generation 1 while the parent concurrently frees, reallocates and
 *   overwrites everything with generation 2; the child then writes its own
 *   generation 11 and checks it, allocates, fills and checks 40 MiB of new
 *   memory of its own, and writes to a MAP_SHARED mapping that the parent
 *   must see. The parent checks generation 2 after the child is done.
 * Round 2: two children alive at once, both check generation 2 while the
 *   parent writes generation 3. Child A writes generation 21 and forks a
 *   grandchild, which checks 21 then writes and checks 22 while A writes and
 *   checks 23. Child B writes and checks 24. The grandchild and child B also
 *   use new memory of their own. The parent checks 3 at the end.
 *
 * HOW says how every fork is made: "fork" (glibc's fork(), which runs the
 * pthread_atfork handlers), or the ways that run none: "_Fork" (glibc
 * 2.34+), "sys_fork" (syscall(SYS_fork)), "sys_clone" (syscall(SYS_clone,
 * SIGCHLD, 0, ...)) and "sys_clone3" (syscall(SYS_clone3) without a stack).
 *
 * Usage: preload_fork [MALLOC_MIB [MMAP_MIB [HOW]]]   (defaults 64 32 fork)
 * Prints "OK ..." as its last line and exits 0, or "FAIL ..." and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#define UNIT 4096
#define WORDS (UNIT / 8)
#define CHUNK ((size_t)1 << 20)
#define MAX_CHUNKS 4096
#define SHARED_LEN ((size_t)1 << 20)

struct chunk {
    uint64_t *p;
    size_t len; /* a multiple of UNIT */
};

static struct chunk chunks[MAX_CHUNKS + 1]; /* the last one is the mmap */
static size_t nchunks;                      /* malloc'd chunks + 1 */
static const char *who = "parent";

static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s: ", who);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    _exit(1);
}

static inline uint64_t word(unsigned gen, size_t c, size_t unit, size_t k) {
    return ((uint64_t)gen << 56) | ((uint64_t)c << 40) | ((uint64_t)unit << 12) | (uint64_t)k;
}

static void stamp_chunk(size_t c, unsigned gen) {
    uint64_t *p = chunks[c].p;
    size_t units = chunks[c].len / UNIT;
    for (size_t u = 0; u < units; u++)
        for (size_t k = 0; k < WORDS; k++) p[u * WORDS + k] = word(gen, c, u, k);
}

/* Checks the first `len` bytes of chunk c against generation gen. */
static void verify_chunk_prefix(size_t c, size_t len, unsigned gen, const char *when) {
    const uint64_t *p = chunks[c].p;
    size_t units = len / UNIT;
    for (size_t u = 0; u < units; u++)
        for (size_t k = 0; k < WORDS; k++) {
            uint64_t got = p[u * WORDS + k], want = word(gen, c, u, k);
            if (got != want)
                fail("%s: chunk %zu unit %zu word %zu is %016llx (gen %u chunk %u unit %u word %u), expected gen %u",
                     when, c, u, k, (unsigned long long)got, (unsigned)(got >> 56), (unsigned)((got >> 40) & 0xffff),
                     (unsigned)((got >> 12) & 0xfffffff), (unsigned)(got & 0xfff), gen);
        }
}

static void stamp_all(unsigned gen) {
    for (size_t c = 0; c < nchunks; c++) stamp_chunk(c, gen);
}

static void verify_all(unsigned gen, const char *when) {
    for (size_t c = 0; c < nchunks; c++) verify_chunk_prefix(c, chunks[c].len, gen, when);
}

static size_t total_bytes(void) {
    size_t t = 0;
    for (size_t c = 0; c < nchunks; c++) t += chunks[c].len;
    return t;
}

/* The parent's concurrent work in round 1: free and reallocate some chunks
 * (malloc may hand back the very addresses the child is reading), grow
 * others with realloc, then overwrite everything with generation gen. */
static void churn_and_stamp(unsigned gen, unsigned old_gen) {
    for (size_t c = 0; c + 1 < nchunks; c++) {
        if (c % 8 == 3) {
            free(chunks[c].p);
            chunks[c].p = malloc(CHUNK);
            if (!chunks[c].p) fail("malloc a new chunk: %s", strerror(errno));
            chunks[c].len = CHUNK;
        } else if (c % 8 == 5) {
            uint64_t *np = realloc(chunks[c].p, CHUNK + CHUNK / 2);
            if (!np) fail("realloc a chunk: %s", strerror(errno));
            chunks[c].p = np;
            verify_chunk_prefix(c, chunks[c].len, old_gen, "parent after realloc");
            chunks[c].len = CHUNK + CHUNK / 2;
        }
        stamp_chunk(c, gen);
    }
    stamp_chunk(nchunks - 1, gen);
}

/* A child's own new memory: MIB MiB of fresh malloc'd chunks, an 8 MiB
 * fresh mapping and ~16 MiB of small blocks, first touched in the child (a
 * Redis BGSAVE child allocates too), written, read back and freed. */
static void fresh_memory(unsigned gen, size_t mib, const char *when) {
    uint64_t *mine[64];
    size_t n = mib < 64 ? mib : 64;
    for (size_t i = 0; i < n; i++) {
        mine[i] = malloc(CHUNK);
        if (!mine[i]) fail("%s: malloc(1 MiB): %s", when, strerror(errno));
        for (size_t w = 0; w < CHUNK / 8; w++) mine[i][w] = word(gen, 5000 + i, w / WORDS, w % WORDS);
    }
    size_t mlen = (size_t)8 << 20;
    uint64_t *m = mmap(NULL, mlen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) fail("%s: mmap(8 MiB): %s", when, strerror(errno));
    for (size_t w = 0; w < mlen / 8; w++) m[w] = word(gen, 6000, w / WORDS, w % WORDS);
    for (size_t i = 0; i < n; i++) {
        for (size_t w = 0; w < CHUNK / 8; w++)
            if (mine[i][w] != word(gen, 5000 + i, w / WORDS, w % WORDS))
                fail("%s: new chunk %zu word %zu is %016llx", when, i, w, (unsigned long long)mine[i][w]);
        free(mine[i]);
    }
    for (size_t w = 0; w < mlen / 8; w++)
        if (m[w] != word(gen, 6000, w / WORDS, w % WORDS))
            fail("%s: new mapping word %zu is %016llx", when, w, (unsigned long long)m[w]);
    if (munmap(m, mlen) != 0) fail("%s: munmap: %s", when, strerror(errno));

    /* Many small blocks too (~16 MiB), served from the allocator's existing
     * arenas rather than from new mappings. */
    enum { SMALL = 16384 };
    unsigned char **small = malloc(SMALL * sizeof *small);
    if (!small) fail("%s: malloc: %s", when, strerror(errno));
    for (size_t i = 0; i < SMALL; i++) {
        size_t len = 64 + (i * 7919) % 1985;
        small[i] = malloc(len);
        if (!small[i]) fail("%s: malloc(%zu): %s", when, len, strerror(errno));
        for (size_t j = 0; j < len; j++) small[i][j] = (unsigned char)(gen + i * 31 + j);
    }
    for (size_t i = 0; i < SMALL; i++) {
        size_t len = 64 + (i * 7919) % 1985;
        for (size_t j = 0; j < len; j++)
            if (small[i][j] != (unsigned char)(gen + i * 31 + j))
                fail("%s: small block %zu byte %zu is 0x%02x", when, i, j, small[i][j]);
        free(small[i]);
    }
    free(small);
}

static const char *how = "fork";

pid_t _Fork(void);

static pid_t fork_as_asked(void) {
    if (strcmp(how, "fork") == 0) return fork();
    if (strcmp(how, "_Fork") == 0) return _Fork();
    if (strcmp(how, "sys_fork") == 0) return (pid_t)syscall(SYS_fork);
    if (strcmp(how, "sys_clone") == 0) return (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    if (strcmp(how, "sys_clone3") == 0) {
        struct clone_args args;
        memset(&args, 0, sizeof args);
        args.exit_signal = SIGCHLD;
        return (pid_t)syscall(SYS_clone3, &args, sizeof args);
    }
    fail("unknown HOW '%s'", how);
    return -1;
}

static pid_t xfork(void) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork_as_asked();
    if (pid < 0) fail("%s: %s", how, strerror(errno));
    return pid;
}

static void reap(pid_t pid, const char *name) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) fail("waitpid(%s): %s", name, strerror(errno));
    if (WIFSIGNALED(status)) fail("%s was killed by signal %d", name, WTERMSIG(status));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail("%s exited with status %d", name, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

static void child_done(void) {
    fflush(stdout);
    _exit(0);
}

int main(int argc, char **argv) {
    size_t malloc_mib = argc > 1 ? (size_t)atol(argv[1]) : 64;
    size_t mmap_mib = argc > 2 ? (size_t)atol(argv[2]) : 32;
    if (argc > 3) how = argv[3];
    if (malloc_mib < 8 || malloc_mib > MAX_CHUNKS || mmap_mib < 1)
        fail("usage: preload_fork [MALLOC_MIB (8..%d) [MMAP_MIB (>= 1) [HOW]]]", MAX_CHUNKS);

    for (size_t c = 0; c < malloc_mib; c++) {
        chunks[c].p = malloc(CHUNK);
        if (!chunks[c].p) fail("malloc(1 MiB): %s", strerror(errno));
        chunks[c].len = CHUNK;
    }
    size_t mlen = mmap_mib << 20;
    void *m = mmap(NULL, mlen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) fail("mmap(%zu): %s", mlen, strerror(errno));
    chunks[malloc_mib].p = m;
    chunks[malloc_mib].len = mlen;
    nchunks = malloc_mib + 1;

    /* A shared anonymous mapping must stay shared with children. */
    uint64_t *shared = mmap(NULL, SHARED_LEN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) fail("mmap(MAP_SHARED): %s", strerror(errno));
    for (size_t k = 0; k < SHARED_LEN / 8; k++) shared[k] = word(1, 9999, 0, k % 4096);

    stamp_all(1);
    verify_all(1, "parent before the first fork");

    /* ---- round 1 ---- */
    pid_t child = xfork();
    if (child == 0) {
        who = "child";
        verify_all(1, "child reading the parent's generation 1");
        for (size_t k = 0; k < SHARED_LEN / 8; k++) {
            if (shared[k] != word(1, 9999, 0, k % 4096)) fail("child: shared word %zu wrong", k);
            shared[k] = word(11, 9999, 0, k % 4096);
        }
        stamp_all(11);
        fresh_memory(12, 16, "child's own new memory");
        verify_all(11, "child reading its own generation 11");
        child_done();
    }
    churn_and_stamp(2, 1);
    reap(child, "child");
    verify_all(2, "parent after the child exited");
    for (size_t k = 0; k < SHARED_LEN / 8; k++)
        if (shared[k] != word(11, 9999, 0, k % 4096))
            fail("the child's write to the MAP_SHARED mapping is not visible: word %zu is %016llx", k,
                 (unsigned long long)shared[k]);

    /* ---- round 2: two children alive at once, and a grandchild ---- */
    pid_t a = xfork();
    if (a == 0) {
        who = "child A";
        verify_all(2, "child A reading the parent's generation 2");
        stamp_all(21);
        pid_t g = xfork();
        if (g == 0) {
            who = "grandchild";
            verify_all(21, "grandchild reading child A's generation 21");
            stamp_all(22);
            fresh_memory(25, 16, "grandchild's own new memory");
            verify_all(22, "grandchild reading its own generation 22");
            child_done();
        }
        stamp_all(23);
        reap(g, "grandchild");
        verify_all(23, "child A reading its own generation 23");
        child_done();
    }
    pid_t b = xfork();
    if (b == 0) {
        who = "child B";
        verify_all(2, "child B reading the parent's generation 2");
        stamp_all(24);
        fresh_memory(26, 16, "child B's own new memory");
        verify_all(24, "child B reading its own generation 24");
        child_done();
    }
    stamp_all(3);
    reap(a, "child A");
    reap(b, "child B");
    verify_all(3, "parent at the end");

    size_t total = total_bytes();
    for (size_t c = 0; c + 1 < nchunks; c++) free(chunks[c].p);
    munmap(m, mlen);
    munmap(shared, SHARED_LEN);
    printf("OK %s malloc_mib=%zu mmap_mib=%zu bytes=%zu forks=4\n", how, malloc_mib, mmap_mib, total);
    return 0;
}
