/* The malloc family from 4 threads at once, with every block stamped with a
 * pattern derived from its id and checked before it is freed, after every
 * realloc, and when another thread takes it over through a shared queue.
 * Meant to run under `tiermem run --dram 8M` with ~50 MiB live.
 *
 * Also checks the edges: malloc_usable_size >= request, overflowing
 * reallocarray/calloc/malloc fail with ENOMEM (and leave the old block
 * intact), calloc zeroes (also memory just freed dirty), posix_memalign
 * rejects bad alignments with EINVAL, and memalign/aligned_alloc/valloc/
 * pvalloc alignment.
 *
 * Usage: preload_threads [OPS_PER_THREAD]
 * Prints "OK ..." as its last line and exits 0, or "FAIL ..." and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define THREADS 4
#define SLOTS 300
#define QUEUE 256

enum kind { K_MALLOC, K_CALLOC, K_POSIX_MEMALIGN, K_ALIGNED_ALLOC, K_MEMALIGN, K_VALLOC, K_REALLOC_NULL, K_KINDS };

struct blk {
    unsigned char *p;
    size_t size;
    uint64_t id;
};

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&out_lock);
    printf("FAIL ");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    _exit(1); /* other threads are still running: no atexit handlers */
}

static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static inline uint64_t pat(uint64_t id, size_t k) {
    uint64_t x = (id + 1) * 0x9E3779B97F4A7C15ull + (uint64_t)k * 0xD1B54A32D192ED03ull;
    return x ^ (x >> 31);
}

/* Blocks from malloc are at least 8-aligned: stamp whole words, then the tail. */
static void fill(unsigned char *p, size_t n, uint64_t id) {
    size_t w = n / 8;
    uint64_t *q = (uint64_t *)(void *)p;
    for (size_t k = 0; k < w; k++) q[k] = pat(id, k);
    uint64_t last = pat(id, w);
    memcpy(p + w * 8, &last, n - w * 8);
}

/* Offset of the first byte that is wrong, or n. */
static size_t check(const unsigned char *p, size_t n, uint64_t id) {
    size_t w = n / 8;
    const uint64_t *q = (const uint64_t *)(const void *)p;
    for (size_t k = 0; k < w; k++)
        if (q[k] != pat(id, k)) {
            uint64_t want = pat(id, k);
            for (size_t b = 0; b < 8; b++)
                if (p[k * 8 + b] != ((const unsigned char *)&want)[b]) return k * 8 + b;
        }
    uint64_t last = pat(id, w);
    for (size_t b = 0; b < n - w * 8; b++)
        if (p[w * 8 + b] != ((const unsigned char *)&last)[b]) return w * 8 + b;
    return n;
}

static void verify(const struct blk *b, size_t n, const char *when) {
    size_t bad = check(b->p, n, b->id);
    if (bad != n)
        fail("%s: block %p id %llu size %zu: byte %zu is 0x%02x, expected pattern (first %zu bytes checked)", when,
             (void *)b->p, (unsigned long long)b->id, b->size, bad, b->p[bad], n);
}

static void check_usable(const void *p, size_t n, const char *what) {
    size_t u = malloc_usable_size((void *)p);
    if (u < n) fail("%s: malloc_usable_size %zu < requested %zu", what, u, n);
}

static void check_align(const void *p, size_t align, size_t size, const char *what) {
    if ((uintptr_t)p % align != 0) fail("%s of %zu bytes: %p is not aligned to %zu", what, size, p, align);
}

/* What malloc must guarantee for a block of n bytes: alignof(max_align_t)
 * (16 on x86-64, as glibc gives), or for a block too small to hold such an
 * object, the largest power of two that fits (C17, DR 445). */
static size_t fundamental_align(size_t n) {
    size_t a = _Alignof(max_align_t);
    while (a > 1 && a > n) a /= 2;
    return a;
}

static void check_zero(const unsigned char *p, size_t n, const char *what) {
    for (size_t j = 0; j < n; j++)
        if (p[j] != 0) fail("%s: byte %zu of %zu is 0x%02x, not zero", what, j, n, p[j]);
}

/* ---- the shared queue: blocks handed from one thread to another ---- */

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static struct blk queue[QUEUE];
static size_t q_head, q_len;
static atomic_ullong next_id = 1;
static atomic_ullong handed_over, taken_over, live_bytes, peak_live, total_ops;

static int q_push(struct blk b) {
    pthread_mutex_lock(&q_lock);
    int ok = q_len < QUEUE;
    if (ok) {
        queue[(q_head + q_len) % QUEUE] = b;
        q_len++;
    }
    pthread_mutex_unlock(&q_lock);
    return ok;
}

static int q_pop(struct blk *b) {
    pthread_mutex_lock(&q_lock);
    int ok = q_len > 0;
    if (ok) {
        *b = queue[q_head];
        q_head = (q_head + 1) % QUEUE;
        q_len--;
    }
    pthread_mutex_unlock(&q_lock);
    return ok;
}

static void account(long long delta) {
    unsigned long long now = atomic_fetch_add(&live_bytes, (unsigned long long)delta) + (unsigned long long)delta;
    unsigned long long peak = atomic_load(&peak_live);
    while (now > peak && !atomic_compare_exchange_weak(&peak_live, &peak, now)) {
    }
}

/* ---- per-thread work ---- */

struct rng {
    uint64_t s;
};
static uint64_t rnd(struct rng *r) { return mix(r->s++); }

static size_t pick_size(struct rng *r) {
    uint64_t x = rnd(r) % 100;
    if (x < 55) return 1 + rnd(r) % 1024;
    if (x < 85) return 1024 + rnd(r) % (31 * 1024);
    if (x < 97) return 32 * 1024 + rnd(r) % (224 * 1024);
    return 256 * 1024 + rnd(r) % (768 * 1024);
}

static struct blk alloc_block(struct rng *r) {
    struct blk b;
    b.size = pick_size(r);
    b.id = atomic_fetch_add(&next_id, 1);
    int kind = (int)(rnd(r) % K_KINDS);
    size_t align = fundamental_align(b.size);
    void *p = NULL;
    switch (kind) {
    case K_MALLOC:
        p = malloc(b.size);
        break;
    case K_CALLOC:
        p = calloc(1 + b.size / 16, 16);
        if (p) check_zero(p, 16 * (1 + b.size / 16), "calloc in a thread");
        break;
    case K_POSIX_MEMALIGN: {
        align = (size_t)1 << (3 + rnd(r) % 10); /* 8 .. 4096 */
        int e = posix_memalign(&p, align, b.size);
        if (e != 0) fail("posix_memalign(%zu, %zu): %s", align, b.size, strerror(e));
        break;
    }
    case K_ALIGNED_ALLOC:
        align = (size_t)1 << (4 + rnd(r) % 13); /* 16 .. 64K */
        b.size = (b.size + align - 1) / align * align;
        p = aligned_alloc(align, b.size);
        break;
    case K_MEMALIGN:
        align = (size_t)1 << (4 + rnd(r) % 9); /* 16 .. 4K */
        p = memalign(align, b.size);
        break;
    case K_VALLOC:
        align = (size_t)sysconf(_SC_PAGESIZE);
        p = valloc(b.size);
        break;
    default:
        p = realloc(NULL, b.size);
        break;
    }
    if (!p) fail("allocation kind %d of %zu bytes: %s", kind, b.size, strerror(errno));
    check_align(p, align, b.size, "allocation");
    check_usable(p, b.size, "allocation");
    b.p = p;
    fill(b.p, b.size, b.id);
    account((long long)b.size);
    return b;
}

static void free_block(struct blk *b, const char *when) {
    verify(b, b->size, when);
    free(b->p);
    account(-(long long)b->size);
    b->p = NULL;
}

static void realloc_block(struct blk *b, struct rng *r) {
    size_t nsize = pick_size(r);
    size_t keep = nsize < b->size ? nsize : b->size;
    verify(b, b->size, "before realloc");
    unsigned char *np = realloc(b->p, nsize);
    if (!np) fail("realloc(%p, %zu): %s", (void *)b->p, nsize, strerror(errno));
    check_align(np, fundamental_align(nsize), nsize, "realloc");
    check_usable(np, nsize, "realloc");
    struct blk nb = {np, nsize, b->id};
    verify(&nb, keep, "after realloc");
    account((long long)nsize - (long long)b->size);
    nb.id = atomic_fetch_add(&next_id, 1);
    fill(nb.p, nb.size, nb.id);
    *b = nb;
}

struct targ {
    int idx;
    long ops;
};

static void *worker(void *arg) {
    struct targ *t = arg;
    struct rng r = {0xC0FFEEull * (uint64_t)(t->idx + 1)};
    struct blk *slot = calloc(SLOTS, sizeof *slot);
    if (!slot) fail("calloc slots");
    for (size_t s = 0; s < SLOTS; s++) slot[s] = alloc_block(&r);
    for (long op = 0; op < t->ops; op++) {
        struct blk *b = &slot[rnd(&r) % SLOTS];
        uint64_t x = rnd(&r) % 100;
        if (x < 35) { /* replace */
            if (b->p) free_block(b, "before free");
            *b = alloc_block(&r);
        } else if (x < 55) { /* realloc, or realloc(NULL) */
            if (b->p) {
                realloc_block(b, &r);
            } else {
                *b = alloc_block(&r);
            }
        } else if (x < 67) { /* hand over to another thread */
            if (b->p && q_push(*b)) {
                b->p = NULL;
                atomic_fetch_add(&handed_over, 1);
            }
        } else if (x < 80) { /* take over a block from any thread */
            struct blk o;
            if (q_pop(&o)) {
                atomic_fetch_add(&taken_over, 1);
                verify(&o, o.size, "taken over from the queue");
                if (!b->p && rnd(&r) % 2) {
                    realloc_block(&o, &r);
                    *b = o;
                } else {
                    free_block(&o, "freeing a block from the queue");
                }
            }
        } else if (b->p) {
            verify(b, b->size, "re-reading");
        }
        if (op % 64 == 0) {
            free(NULL);
        }
    }
    for (size_t s = 0; s < SLOTS; s++)
        if (slot[s].p) free_block(&slot[s], "final free");
    free(slot);
    atomic_fetch_add(&total_ops, (unsigned long long)t->ops);
    return NULL;
}

/* ---- single-threaded edge cases ---- */

static void edge_cases(void) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    /* Overflow and impossible sizes: NULL with ENOMEM, the old block kept.
     * (Through a volatile, so the compiler cannot see the sizes and warn.) */
    volatile size_t huge = SIZE_MAX;
    unsigned char *keep = malloc(5000);
    if (!keep) fail("malloc(5000)");
    struct blk kb = {keep, 5000, 777};
    fill(keep, 5000, 777);
    errno = 0;
    void *p = reallocarray(NULL, huge / 2 + 1, 2);
    if (p || errno != ENOMEM) fail("reallocarray(NULL, overflow): %p errno %d", p, errno);
    errno = 0;
    p = reallocarray(keep, huge / 4, 8);
    if (p || errno != ENOMEM) fail("reallocarray(p, overflow): %p errno %d", p, errno);
    verify(&kb, 5000, "after a failed reallocarray");
    p = reallocarray(keep, 100, 100);
    if (!p) fail("reallocarray(p, 100, 100): %s", strerror(errno));
    kb.p = p;
    verify(&kb, 5000, "after reallocarray");
    check_usable(p, 10000, "reallocarray");
    errno = 0;
    void *q = realloc(p, huge - 4096);
    if (q || errno != ENOMEM) fail("realloc(p, huge - 4096): %p errno %d", q, errno);
    verify(&kb, 5000, "after a failed realloc");
    free(p);
    errno = 0;
    p = calloc(huge / 2, 4);
    if (p || errno != ENOMEM) fail("calloc overflow: %p errno %d", p, errno);
    errno = 0;
    p = malloc(huge / 2);
    if (p || errno != ENOMEM) fail("malloc(SIZE_MAX / 2): %p errno %d", p, errno);
    if (malloc_usable_size(NULL) != 0) fail("malloc_usable_size(NULL) != 0");

    /* calloc zeroes, also right after the same size was freed dirty. */
    static const size_t sizes[] = {1, 24, 200, 4000, 70000, 300000, 3u << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        for (int rep = 0; rep < 4; rep++) {
            unsigned char *d = malloc(n);
            if (!d) fail("malloc(%zu)", n);
            memset(d, 0xA5, n);
            free(d);
            unsigned char *z = rep % 2 ? calloc(n, 1) : calloc(1, n);
            if (!z) fail("calloc(%zu)", n);
            check_usable(z, n, "calloc");
            check_zero(z, n, "calloc after a dirty free of the same size");
            memset(z, 0x5A, n);
            free(z);
        }
    }

    /* Alignment. */
    for (size_t align = 16; align <= ((size_t)1 << 20); align <<= 1) {
        unsigned char *m = memalign(align, 1000);
        if (!m) fail("memalign(%zu, 1000)", align);
        check_align(m, align, 1000, "memalign");
        check_usable(m, 1000, "memalign");
        struct blk mb = {m, 1000, align};
        fill(m, 1000, align);
        verify(&mb, 1000, "memalign block");
        free(m);
        void *pm = NULL;
        int e = posix_memalign(&pm, align, 3 * align + 1);
        if (e != 0) fail("posix_memalign(%zu): %s", align, strerror(e));
        check_align(pm, align, 3 * align + 1, "posix_memalign");
        check_usable(pm, 3 * align + 1, "posix_memalign");
        memset(pm, 1, 3 * align + 1);
        free(pm);
        unsigned char *aa = aligned_alloc(align, 2 * align);
        if (!aa) fail("aligned_alloc(%zu)", align);
        check_align(aa, align, 2 * align, "aligned_alloc");
        check_usable(aa, 2 * align, "aligned_alloc");
        memset(aa, 2, 2 * align);
        free(aa);
    }
    void *bad = (void *)1;
    if (posix_memalign(&bad, 24, 100) != EINVAL) fail("posix_memalign(24) must fail with EINVAL");
    if (posix_memalign(&bad, sizeof(void *) / 2, 100) != EINVAL)
        fail("posix_memalign(sizeof(void*)/2) must fail with EINVAL");
    unsigned char *v = valloc(5000);
    if (!v) fail("valloc(5000)");
    check_align(v, page, 5000, "valloc");
    check_usable(v, 5000, "valloc");
    memset(v, 3, 5000);
    free(v);
    unsigned char *pv = pvalloc(5000);
    if (!pv) fail("pvalloc(5000)");
    check_align(pv, page, 5000, "pvalloc");
    check_usable(pv, (5000 + page - 1) / page * page, "pvalloc (rounded up to a page)");
    memset(pv, 4, (5000 + page - 1) / page * page);
    free(pv);

    /* realloc keeps contents across sizes that cross every threshold. */
    static const size_t steps[] = {100, 1 << 20, 3 << 20, 200 << 10, 100, 9 << 20, 17};
    unsigned char *rb = malloc(10);
    if (!rb) fail("malloc(10)");
    struct blk b = {rb, 10, 4242};
    fill(rb, 10, 4242);
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        size_t keepn = steps[i] < b.size ? steps[i] : b.size;
        unsigned char *nr = realloc(b.p, steps[i]);
        if (!nr) fail("realloc to %zu", steps[i]);
        check_usable(nr, steps[i], "realloc step");
        b.p = nr;
        verify(&b, keepn, "realloc step");
        b.size = steps[i];
        fill(b.p, b.size, b.id);
    }
    free(b.p);
}

int main(int argc, char **argv) {
    long ops = argc > 1 ? atol(argv[1]) : 3000;
    if (ops < 0) fail("usage: preload_threads [OPS_PER_THREAD]");
    edge_cases();

    pthread_t th[THREADS];
    struct targ args[THREADS];
    for (int i = 0; i < THREADS; i++) {
        args[i].idx = i;
        args[i].ops = ops;
        int e = pthread_create(&th[i], NULL, worker, &args[i]);
        if (e != 0) fail("pthread_create: %s", strerror(e));
    }
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    struct blk b;
    size_t left = 0;
    while (q_pop(&b)) {
        free_block(&b, "draining the queue");
        left++;
    }
    if (atomic_load(&live_bytes) != 0) fail("accounting: %llu bytes still live", atomic_load(&live_bytes));
    printf("OK threads=%d ops=%llu handed_over=%llu taken_over=%llu drained=%zu peak_live_mib=%.1f\n", THREADS,
           atomic_load(&total_ops), atomic_load(&handed_over), atomic_load(&taken_over), left,
           (double)atomic_load(&peak_live) / (1 << 20));
    return 0;
}
