/*
 * What a non-fatal signal does to a thread waiting in a userfaultfd fault,
 * taken in user mode and in kernel mode (a system call's copy to or from a
 * missing page). A handler thread reads each fault, sends the faulting
 * thread SIGUSR1 (its thread id comes with the message), waits 50 ms and
 * installs the page.
 *
 * On Linux 6.18 (2026-11-29): the user-mode fault runs the signal handler
 * and waits again, asleep; the kernel-mode faults complete their system
 * calls (read(2), write(2), pread(2): no EFAULT), but the thread retries
 * the fault in the kernel for the whole wait, busy (as much CPU time as
 * the wait is long): a pending signal makes the interruptible wait in
 * handle_userfault return at once, and a kernel-mode fault is retried
 * unless the signal is fatal.
 *
 * Build and run: cc -O2 -pthread -o /tmp/sigfault docs/perf/signal_in_kernel_fault.c && /tmp/sigfault
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FAULTS 4

static int uffd;
static volatile char *area;
static long page;
static volatile int kicks;
static volatile int duplicates;
static char source[65536];

static void on_kick(int sig) { (void)sig; kicks++; }

static double thread_cpu_ms(void) {
    struct rusage u;
    getrusage(RUSAGE_THREAD, &u);
    return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
           (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

static void *serve(void *arg) {
    (void)arg;
    for (int n = 0; n < FAULTS;) {
        struct pollfd p = { uffd, POLLIN, 0 };
        poll(&p, 1, -1);
        struct uffd_msg m;
        if (read(uffd, &m, sizeof m) != sizeof m || m.event != UFFD_EVENT_PAGEFAULT)
            continue;
        syscall(SYS_tgkill, getpid(), m.arg.pagefault.feat.ptid, SIGUSR1);
        usleep(50000);
        memset(source, 'A' + n, page);
        struct uffdio_copy c = {
            .dst = m.arg.pagefault.address & ~(page - 1),
            .src = (unsigned long)source,
            .len = page,
        };
        // A kernel-mode fault retried while the signal was pending can
        // leave a second message for a page installed since: not counted.
        if (ioctl(uffd, UFFDIO_COPY, &c) == 0)
            n++;
        else if (errno == EEXIST)
            duplicates++;
        else
            perror("UFFDIO_COPY");
    }
    return NULL;
}

static void report(const char *what, ssize_t n, double ms) {
    printf("%-36s %zd (%s), %d kicks so far, %.1f ms of CPU while it waited\n", what, n,
           n < 0 ? strerror(errno) : "ok", kicks, ms);
}

int main(void) {
    page = sysconf(_SC_PAGESIZE);
    struct sigaction sa = { 0 };
    sa.sa_handler = on_kick;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    uffd = syscall(SYS_userfaultfd, O_CLOEXEC);
    struct uffdio_api api = { .api = UFFD_API, .features = UFFD_FEATURE_THREAD_ID };
    if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api)) {
        perror("userfaultfd");
        return 1;
    }
    area = mmap(NULL, FAULTS * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct uffdio_register r = {
        .range = { (unsigned long)area, FAULTS * page },
        .mode = UFFDIO_REGISTER_MODE_MISSING,
    };
    if (ioctl(uffd, UFFDIO_REGISTER, &r)) {
        perror("UFFDIO_REGISTER");
        return 1;
    }
    pthread_t t;
    pthread_create(&t, NULL, serve, NULL);

    double t0 = thread_cpu_ms();
    char c = area[0];
    int kicks_then = kicks;
    printf("user-mode load: byte '%c', the handler ran %d time(s), %.1f ms of CPU\n", c,
           kicks_then, thread_cpu_ms() - t0);

    int fds[2];
    char msg[100], back[100];
    memset(msg, 'z', sizeof msg);
    if (pipe(fds) || write(fds[1], msg, sizeof msg) != sizeof msg)
        return 1;
    t0 = thread_cpu_ms();
    ssize_t n = read(fds[0], (char *)area + page, sizeof msg);
    report("read(2) into a missing page:", n, thread_cpu_ms() - t0);

    t0 = thread_cpu_ms();
    n = write(fds[1], (char *)area + 2 * page, sizeof msg);
    report("write(2) from a missing page:", n, thread_cpu_ms() - t0);
    if (read(fds[0], back, sizeof back) != sizeof back || back[0] != 'C')
        printf("write(2) sent the wrong bytes\n");

    int f = open("/proc/self/stat", O_RDONLY);
    t0 = thread_cpu_ms();
    n = pread(f, (char *)area + 3 * page, 4, 0);
    report("pread(2) into a missing page:", n, thread_cpu_ms() - t0);
    pthread_join(t, NULL);
    printf("messages for pages already installed: %d\n", duplicates);
    return 0;
}
