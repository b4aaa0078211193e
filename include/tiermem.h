/*
 * tiermem.h: the C API of tiermem, a software Memory Mode for Linux.
 *
 * Tiered memory is cached in a bounded DRAM budget and backed by a file or
 * block device. Link with -ltiermem (libtiermem.so).
 *
 * The library starts lazily on the first call, configured from TIERMEM_*
 * environment variables (the README's Configuration table says what each
 * does), or explicitly with tm_init():
 *   budget and store: TIERMEM_DRAM, TIERMEM_BACKING, TIERMEM_BACKING_SIZE,
 *     TIERMEM_PAGE_SIZE, TIERMEM_WATERMARK_SCALE_FACTOR;
 *   policy and cache organization: TIERMEM_POLICY, TIERMEM_ASSOCIATIVITY,
 *     TIERMEM_PREFETCH, TIERMEM_WRITE_POLICY, TIERMEM_INCLUSION,
 *     TIERMEM_PRESET;
 *   faults and I/O: TIERMEM_FAULTS, TIERMEM_HANDLER_THREADS,
 *     TIERMEM_IO_ENGINE, TIERMEM_IO_DEPTH, TIERMEM_IO_POLL,
 *     TIERMEM_READAHEAD, TIERMEM_PREDICT_WRITES, TIERMEM_IDLE_SPIN_US,
 *     TIERMEM_ASYNC_IO;
 *   the compressed tier: TIERMEM_COMPRESS, TIERMEM_COMPRESS_SHARE,
 *     TIERMEM_COMPRESS_DICT;
 *   the error policy: TIERMEM_CHECKSUMS, TIERMEM_ENCRYPT,
 *     TIERMEM_IO_DEADLINE, and TIERMEM_INJECT_FAULTS for tests;
 *   reporting: TIERMEM_STATS, TIERMEM_STATS_FILE, TIERMEM_CONTROL;
 *   under `tiermem run` only: TIERMEM_MMAP_THRESHOLD, TIERMEM_NO_INHERIT,
 *   TIERMEM_MEMFD.
 * Each process answers `tiermem ctl PID stats|budget SIZE` on a control
 * socket unless TIERMEM_CONTROL=off.
 *
 * A page tiermem cannot read back (an I/O error twice, or a checksum
 * mismatch) is lost: its access gets SIGBUS, as for a hardware memory
 * error, and stderr names the address, the backing file and the offset.
 * On failure, functions return NULL or -1, set errno, and tm_last_error()
 * describes what went wrong and how to fix it.
 */
#ifndef TIERMEM_H
#define TIERMEM_H

#include <stddef.h>
#include <stdint.h>

/* The version of this header; tm_version() gives the library's. The two
 * differ when a program runs against another libtiermem.so.0 than the one
 * it was built with. */
#define TIERMEM_VERSION_MAJOR 0
#define TIERMEM_VERSION_MINOR 1
#define TIERMEM_VERSION_PATCH 0
#define TIERMEM_VERSION "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

/* Explicit configuration. Zero or NULL fields keep the value from the
 * environment, or the default when the environment does not set it. */
struct tm_config {
    uint64_t dram_budget;      /* bytes of DRAM for tiered pages */
    const char *backing_path;  /* directory, file or block device */
    uint64_t backing_size;     /* cap on the backing store, bytes */
    uint64_t page_size;        /* power of two, 4096 .. 2097152 */
    const char *policy;        /* "clock" (default), "fifo" or "s3fifo" */
    uint32_t handler_threads;  /* userfaultfd handler threads */
    uint32_t reserved0;
    /* Cache organization, as the TIERMEM_* variables of the same names: */
    const char *associativity; /* "0" fully associative, "1" direct-mapped, "N" N-way */
    const char *prefetch;      /* pages read after each miss ("0": none); NULL: adaptive */
    const char *write_policy;  /* "write-back" (default) or "write-through" */
    const char *inclusion;     /* "inclusive" (default) or "exclusive" */
    const char *preset;        /* "memory-mode": direct-mapped, write-back, inclusive */
    /* Who resolves a fault, as TIERMEM_FAULTS: "handler" (default: handler
     * threads; the kernel's own accesses wait for evicted pages too) or
     * "signal" (the faulting thread, through SIGBUS: no cross-CPU wake-up per
     * miss, but a system call given tiered memory that is not resident fails
     * with EFAULT, and tiermem owns the SIGBUS handler, passing on the
     * SIGBUSes that are not its own to the handler installed before it). */
    const char *faults;
};

struct tm_latency {
    uint64_t count;
    uint64_t mean_ns;
    uint64_t p50_ns;
    uint64_t p90_ns;
    uint64_t p99_ns;
    uint64_t p999_ns;
    uint64_t max_ns;
};

struct tm_stats {
    uint64_t faults;              /* userfaultfd faults served (missing + write-protect) */
    uint64_t missing_faults;
    uint64_t wp_faults;           /* first writes to clean pages */
    uint64_t zero_fills;          /* first touches of never-written pages */
    uint64_t page_ins;            /* pages read from the backing store */
    uint64_t page_outs;           /* pages written to the backing store */
    uint64_t clean_drops;         /* clean pages dropped without a write */
    uint64_t zero_drops;          /* all-zero pages dropped without a write */
    uint64_t probation_hits;      /* re-references caught in probation (no I/O) */
    uint64_t bytes_read;
    uint64_t bytes_written;
    uint64_t resident_bytes;      /* DRAM held by tiered pages now */
    uint64_t peak_resident_bytes;
    uint64_t budget_bytes;
    uint64_t allocated_bytes;     /* live tm_alloc'd bytes (page-rounded) */
    uint64_t backing_bytes;       /* space the backing file occupies */
    uint64_t metadata_bytes;      /* DRAM the runtime uses for itself */
    uint64_t page_size;
    struct tm_latency fault_latency; /* as seen by the handler threads */
    uint64_t prefetch_issued;     /* pages read ahead of demand */
    uint64_t prefetch_hits;       /* read-ahead pages later used */
    uint64_t prefetch_wasted;     /* read-ahead pages evicted unused */
    uint64_t conflict_evictions;  /* pages a miss evicted from its full set */
    uint64_t write_throughs;      /* written pages copied out by write-through */
    uint64_t predicted_writes;    /* read faults installed writable: a write was predicted */
    uint64_t io_errors;           /* failed or corrupt page reads, failed writes */
    uint64_t poisoned_pages;      /* lost to a read that failed twice: access gets SIGBUS */
    uint64_t parked_bytes;        /* store space freed but kept while forked children may read it */
    uint64_t compressed_pages;    /* pages held compressed in DRAM now */
    uint64_t pool_bytes;          /* DRAM the compressed pool holds (part of resident_bytes) */
    uint64_t compressed_stores;   /* pages that entered the compressed tier */
    uint64_t same_filled_pages;   /* of those, kept as one repeated word */
    uint64_t compress_rejected;   /* saved less than a quarter: sent to the store */
    uint64_t compressed_writebacks; /* compressed pages that left for the store */
    uint64_t compressed_hits;     /* faults served by decompressing */
    uint64_t neighbour_reads;     /* pages read with a miss on the page before (part of prefetch_issued) */
    uint64_t neighbour_samples;   /* of those, parked to sample their use */
    uint64_t neighbour_used;      /* sampled neighbours the program used */
    uint64_t compress_bypassed;   /* sent to the store uncompressed by a full pool that served no hits */
};

/* Starts tiermem. cfg may be NULL (environment only). Returns 0, or -1 with
 * errno: EBUSY if already started, EINVAL for a bad setting, EPERM when
 * userfaultfd is not permitted, or the backing store's error. */
int tm_init(const struct tm_config *cfg);

/* Zeroed, page-aligned tiered memory; NULL with errno (EINVAL for len 0,
 * ENOMEM when the backing store cannot hold it) on failure. */
void *tm_alloc(size_t len);

/* Frees tm_alloc'd memory; its DRAM and backing slots are reused. NULL is a
 * no-op. */
void tm_free(void *p);

/* Resizes, preserving contents. p NULL acts as tm_alloc; len 0 frees p and
 * returns NULL. On failure returns NULL and leaves p intact. */
void *tm_realloc(void *p, size_t len);

/* Sets the DRAM budget; a shrink returns once resident memory fits. */
int tm_set_dram_budget(size_t bytes);
size_t tm_get_dram_budget(void);

int tm_stats(struct tm_stats *out);

/* The calling thread's last error message, or "" if none. */
const char *tm_last_error(void);

/* The version of the loaded library, "MAJOR.MINOR.PATCH" (a static string;
 * never NULL). Does not start tiermem. */
const char *tm_version(void);

#ifdef __cplusplus
}
#endif

#endif /* TIERMEM_H */
