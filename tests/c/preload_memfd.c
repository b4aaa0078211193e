/* A memfd mapped shared and read-write, as QEMU maps
 * `memory-backend-memfd` guest RAM, then shown to others one way or
 * another while threads write it. Meant to run under
 * `tiermem run --dram 16M`, where the 64 MiB mapping is tiered memory
 * until the file becomes visible, and must then be the file's.
 *
 * usage: preload_memfd MODE, MODE one of
 *   none          nothing is shown: the mapping stays tiered to the end
 *   pread         the file is read through its descriptor
 *   pwrite        a page is written through the descriptor: the mapping
 *                 shows it
 *   dup           the descriptor is duplicated, the file read through the
 *                 copy
 *   sendmsg       the descriptor is sent over a socket (SCM_RIGHTS), and
 *                 the file read through the one received
 *   fork          a child writes a page through the mapping: the parent
 *                 sees it, as shared memory does
 *   fork-dontfork the mapping is MADV_DONTFORK: a child that does not touch
 *                 it changes nothing
 *   mmap2         the file is mapped a second time: both views show the
 *                 same bytes, and a write through one shows in the other
 *   punch         a page is punched out (fallocate): it reads zeros, and
 *                 the mapping stays tiered until the file is read back
 *   munmap        the mapping goes while the descriptor is open: mapped
 *                 again, the file shows every byte
 *   close-munmap  the descriptor is closed, then the mapping goes: the
 *                 memory is gone, and a new memfd is tiered again
 *   close_range-munmap  the same, the descriptor closed by close_range
 *   lost          under TIERMEM_INJECT_FAULTS=read:1- every page read back
 *                 from the store is lost (SIGBUS, caught); the file is then
 *                 read: lost pages are zeros in the mapping and the file,
 *                 the others keep their stamp (without the variable, no
 *                 page may be lost)
 *
 * 1. memfd_create(MFD_CLOEXEC), ftruncate to 64 MiB, sealed as QEMU seals
 *    it, mapped MAP_FIXED into a PROT_NONE reservation; every byte of it
 *    is stamped and read back (four times the budget: it pages).
 * 2. Three threads rewrite pages of their own (page % 3) with versioned
 *    stamps, all along, while the main thread shows the file (MODE).
 * 3. Once the threads stop, every byte of every page reads its last
 *    version (or the stamp, or what MODE put there), through the mapping
 *    and, where the file is shown, through the descriptor.
 *
 * Prints "OK ..." and exits 0, or "FAIL ..." and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024UL * 1024UL)
#define PAGE 4096UL
#define SIZE (64 * MIB)
#define PAGES (SIZE / PAGE)
#define WRITERS 3
/* Pages the writers leave alone, for what MODE does to single pages. */
#define QUIET 16
#define SPECIAL 7

static uint8_t *map;
static atomic_uint versions[PAGES];
static atomic_int stop;
static const char *mode;
/* A second descriptor of the file MODE made (dup, sendmsg), read whole
 * once the writers stop; -1 if none. */
static int other_fd = -1;

static void fail(const char *what) {
    printf("FAIL %s: %s (errno %d: %s)\n", mode, what, errno, strerror(errno));
    fflush(stdout);
    exit(1);
}

/* The byte at `i` of page `page` in version `v` (0: the first stamp). */
static uint8_t stamp(size_t page, size_t i, unsigned v) {
    uint32_t x = (uint32_t)(page * 2654435761u) ^ (uint32_t)(i * 40503u) ^ (v * 97u);
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    return (uint8_t)(x ^ (x >> 15));
}

static void fill_page(uint8_t *p, size_t page, unsigned v) {
    for (size_t i = 0; i < PAGE; i++) p[i] = stamp(page, i, v);
}

static int page_is(const uint8_t *p, size_t page, unsigned v) {
    for (size_t i = 0; i < PAGE; i++)
        if (p[i] != stamp(page, i, v)) return 0;
    return 1;
}

static void *writer(void *arg) {
    size_t me = (size_t)arg;
    uint64_t r = 88172645463325252ull + me;
    unsigned long writes = 0;
    while (!atomic_load(&stop) || writes < 2000) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        size_t page = QUIET + (r % ((PAGES - QUIET) / WRITERS)) * WRITERS;
        page = page - page % WRITERS + me;
        if (page < QUIET || page >= PAGES) continue;
        unsigned v = atomic_load(&versions[page]) + 1;
        fill_page(map + page * PAGE, page, v);
        atomic_store(&versions[page], v);
        writes++;
    }
    return (void *)writes;
}

/* Every page through `view` reads its last version; `special` tells what
 * page SPECIAL holds: 0 its stamp, 1 the pattern MODE wrote, 2 zeros. */
static void verify(const uint8_t *view, const char *what, int special) {
    for (size_t page = 0; page < PAGES; page++) {
        const uint8_t *p = view + page * PAGE;
        int ok;
        if (page == SPECIAL && special == 1)
            ok = page_is(p, page, 1000);
        else if (page == SPECIAL && special == 2)
            ok = p[0] == 0 && !memcmp(p, p + 1, PAGE - 1);
        else
            ok = page_is(p, page, atomic_load(&versions[page]));
        if (!ok) {
            printf("FAIL %s: page %zu reads wrong through %s (version %u)\n", mode, page, what,
                   atomic_load(&versions[page]));
            exit(1);
        }
    }
}

/* The file, read whole through `fd`, holds what the mapping holds. */
static void verify_file(int fd, const char *what, int special) {
    uint8_t *copy = malloc(SIZE);
    if (!copy) fail("malloc");
    for (size_t done = 0; done < SIZE;) {
        ssize_t n = pread(fd, copy + done, SIZE - done, done);
        if (n <= 0) fail("pread of the file");
        done += n;
    }
    verify(copy, what, special);
    free(copy);
}

static int received_fd(int sock) {
    char data;
    struct iovec iov = {&data, 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } u;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                         .msg_controllen = sizeof u.buf};
    if (recvmsg(sock, &msg, 0) != 1) fail("recvmsg");
    int fd;
    memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof fd);
    return fd;
}

static int send_fd(int fd) {
    int socks[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, socks)) fail("socketpair");
    char data = 'x';
    struct iovec iov = {&data, 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                         .msg_controllen = sizeof u.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    if (sendmsg(socks[0], &msg, 0) != 1) fail("sendmsg");
    int got = received_fd(socks[1]);
    close(socks[0]);
    close(socks[1]);
    return got;
}

static int new_memfd(void) {
    int fd = memfd_create("tiermem-test-ram", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) fail("memfd_create");
    if (ftruncate(fd, SIZE)) fail("ftruncate");
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW)) fail("F_ADD_SEALS");
    return fd;
}

/* QEMU's way: a PROT_NONE reservation, the file mapped into it. */
static uint8_t *map_memfd(int fd) {
    uint8_t *res = mmap(NULL, SIZE + PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (res == MAP_FAILED) fail("reserving address space");
    uint8_t *p = mmap(res, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED) fail("mapping the memfd");
    return p;
}

/* Shows the file as MODE says, while the writers run; returns what page
 * SPECIAL holds (see verify) and whether the file is to be checked. */
static int show(int fd, int *check_file) {
    *check_file = 1;
    uint8_t pattern[PAGE];
    fill_page(pattern, SPECIAL, 1000);
    if (!strcmp(mode, "none") || !strcmp(mode, "fork-dontfork")) {
        *check_file = 0;
        if (!strcmp(mode, "fork-dontfork")) {
            pid_t child = fork();
            if (child < 0) fail("fork");
            if (child == 0) _exit(0);
            int status;
            if (waitpid(child, &status, 0) != child || status != 0) fail("the child");
        }
        return 0;
    }
    if (!strcmp(mode, "pread")) {
        uint8_t buf[PAGE];
        if (pread(fd, buf, PAGE, 3 * PAGE) != (ssize_t)PAGE) fail("pread");
        if (!page_is(buf, 3, 0)) fail("pread returned other bytes than the mapping's");
        return 0;
    }
    if (!strcmp(mode, "pwrite")) {
        if (pwrite(fd, pattern, PAGE, SPECIAL * PAGE) != (ssize_t)PAGE) fail("pwrite");
        return 1;
    }
    if (!strcmp(mode, "dup")) {
        other_fd = dup(fd);
        if (other_fd < 0) fail("dup");
        return 0;
    }
    if (!strcmp(mode, "sendmsg")) {
        other_fd = send_fd(fd);
        uint8_t buf[PAGE];
        if (pread(other_fd, buf, PAGE, 5 * PAGE) != (ssize_t)PAGE) fail("pread of the received fd");
        if (!page_is(buf, 5, 0)) fail("the received descriptor reads other bytes");
        return 0;
    }
    if (!strcmp(mode, "fork")) {
        pid_t child = fork();
        if (child < 0) fail("fork");
        if (child == 0) {
            memcpy(map + SPECIAL * PAGE, pattern, PAGE);
            _exit(0);
        }
        int status;
        if (waitpid(child, &status, 0) != child || status != 0) fail("the child");
        return 1;
    }
    if (!strcmp(mode, "mmap2")) {
        uint8_t *second = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (second == MAP_FAILED) fail("mapping the memfd again");
        memcpy(second + SPECIAL * PAGE, pattern, PAGE);
        if (!page_is(map + SPECIAL * PAGE, SPECIAL, 1000))
            fail("a write through the second mapping is not seen in the first");
        if (!page_is(second + 2 * PAGE, 2, 0)) fail("the second mapping reads other bytes");
        return 1;
    }
    if (!strcmp(mode, "punch")) {
        if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, SPECIAL * PAGE, PAGE))
            fail("fallocate PUNCH_HOLE");
        return 2;
    }
    printf("FAIL unknown mode %s\n", mode);
    exit(2);
}

static void run_writers(int fd, int *special, int *check_file) {
    pthread_t threads[WRITERS];
    for (size_t t = 0; t < WRITERS; t++)
        if (pthread_create(&threads[t], NULL, writer, (void *)t)) fail("pthread_create");
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
    *special = show(fd, check_file);
    nanosleep(&pause, NULL);
    atomic_store(&stop, 1);
    unsigned long writes = 0;
    for (size_t t = 0; t < WRITERS; t++) {
        void *n;
        pthread_join(threads[t], &n);
        writes += (unsigned long)n;
    }
    printf("writers: %lu page writes\n", writes);
}

/* munmap and close-munmap: the mapping goes, with the writers stopped. */
static int unmap_modes(int fd) {
    if (!strcmp(mode, "munmap")) {
        if (munmap(map, SIZE)) fail("munmap");
        map = map_memfd(fd);
        verify(map, "the file mapped again", 0);
        verify_file(fd, "the descriptor", 0);
        printf("OK %s: %lu pages kept by the file after munmap\n", mode, PAGES);
        return 1;
    }
    if (!strcmp(mode, "close-munmap") || !strcmp(mode, "close_range-munmap")) {
        if (!strncmp(mode, "close_range", 11)) {
            if (close_range(fd, fd, 0)) fail("close_range");
        } else {
            close(fd);
        }
        if (munmap(map, SIZE)) fail("munmap");
        int again = new_memfd();
        map = map_memfd(again);
        for (size_t page = 0; page < PAGES; page++) fill_page(map + page * PAGE, page, 7);
        for (size_t page = 0; page < PAGES; page++)
            if (!page_is(map + page * PAGE, page, 7)) fail("the new memfd's mapping");
        printf("OK %s: a new memfd mapped and stamped after the first went\n", mode);
        return 1;
    }
    return 0;
}

static sigjmp_buf bus_jump;

static void on_sigbus(int sig) {
    (void)sig;
    siglongjmp(bus_jump, 1);
}

/* Whether page `page` of `view` reads its stamp; false (and lost) if
 * reading it raised SIGBUS. */
static int stamped_or_lost(const uint8_t *view, size_t page, int *lost) {
    *lost = 0;
    if (sigsetjmp(bus_jump, 1)) {
        *lost = 1;
        return 0;
    }
    return page_is(view + page * PAGE, page, 0);
}

/* The lost mode: pages lost to read errors, then the file shown. */
static int lost_mode(int fd) {
    if (strcmp(mode, "lost")) return 0;
    int expect_losses = getenv("TIERMEM_INJECT_FAULTS") != NULL;
    struct sigaction sa = {.sa_handler = on_sigbus};
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, NULL)) fail("sigaction");
    static uint8_t lost[PAGES];
    size_t losses = 0;
    for (size_t page = 0; page < PAGES; page++) {
        int gone;
        if (stamped_or_lost(map, page, &gone)) continue;
        if (!gone) fail("a page reads wrong bytes");
        lost[page] = 1;
        losses++;
    }
    if (expect_losses != (losses > 0)) {
        printf("FAIL lost: %zu pages lost, %s expected\n", losses, expect_losses ? "some" : "none");
        exit(1);
    }
    /* The file a page at a time, into the stack: heap memory is tiered,
     * and would read back through the failing store. */
    uint8_t buf[PAGE];
    for (size_t page = 0; page < PAGES; page++) {
        if (pread(fd, buf, PAGE, page * PAGE) != (ssize_t)PAGE) fail("pread of the file");
        const uint8_t *views[2] = {map + page * PAGE, buf};
        for (int v = 0; v < 2; v++) {
            int ok = lost[page] ? views[v][0] == 0 && !memcmp(views[v], views[v] + 1, PAGE - 1)
                                : page_is(views[v], page, 0);
            if (!ok) {
                printf("FAIL lost: page %zu (%s) reads wrong through the %s\n", page,
                       lost[page] ? "lost" : "kept", v ? "file" : "mapping");
                exit(1);
            }
        }
    }
    printf("OK lost: %zu of %lu pages lost, zeros in the mapping and the file; the rest kept\n",
           losses, PAGES);
    return 1;
}

int main(int argc, char **argv) {
    mode = argc > 1 ? argv[1] : "none";
    int fd = new_memfd();
    map = map_memfd(fd);
    if (!strcmp(mode, "fork-dontfork") && madvise(map, SIZE, MADV_DONTFORK)) fail("MADV_DONTFORK");
    for (size_t page = 0; page < PAGES; page++) fill_page(map + page * PAGE, page, 0);
    if (lost_mode(fd)) return 0;
    verify(map, "the mapping, stamped", 0);
    if (unmap_modes(fd)) return 0;
    int special, check_file;
    run_writers(fd, &special, &check_file);
    verify(map, "the mapping", special);
    if (check_file) verify_file(fd, "the descriptor", special);
    if (other_fd >= 0) verify_file(other_fd, "the second descriptor", special);
    printf("OK %s: %lu pages of 64 MiB verified%s\n", mode, PAGES,
           check_file ? ", through the mapping and the file" : "");
    return 0;
}
