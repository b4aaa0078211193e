/* stdio and read(2) into tiered memory that was never touched before the read
 * (the "fscanf bug" of a SIGSEGV-based Memory Mode: a syscall that writes
 * into a non-resident buffer must simply wait for the page, not fail with
 * EFAULT). Meant to run under `tiermem run --dram 1M` (the smallest budget
 * it accepts): every buffer here is several times the budget.
 *
 * Usage: preload_stdio DATAFILE
 * Writes DATAFILE (fprintf of many numbers, then a binary blob written with
 * fwrite from a mostly evicted buffer), reads it back with fread, fscanf
 * (through a large, fresh stdio buffer), read(2), pread(2) and readv(2) into
 * fresh malloc'd buffers, and checks every byte. Prints "OK ..." as its last
 * line and exits 0, or prints "FAIL ..." and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define NUMS 400000
#define BLOB ((size_t)6 << 20)
#define STDIO_BUF ((size_t)2 << 20)

static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    exit(1);
}

static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static int number(size_t i) { return (int)(uint32_t)mix(i); }

static unsigned char blob_byte(size_t j) {
    return (unsigned char)(mix(0x5EED0000ull + j / 8) >> (8 * (j % 8)));
}

static void fill_blob(unsigned char *b, size_t n) {
    for (size_t j = 0; j < n; j++) b[j] = blob_byte(j);
}

/* Index of the first byte of b that differs from the blob pattern, or n. */
static size_t check_blob(const unsigned char *b, size_t n) {
    for (size_t j = 0; j < n; j++)
        if (b[j] != blob_byte(j)) return j;
    return n;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) fail("malloc(%zu): %s", n, strerror(errno));
    return p;
}

/* The whole expected file, built in plain memory (malloc'd too: under
 * tiermem it is tiered like everything else). */
static size_t expected_text(char *out, size_t cap) {
    size_t len = 0;
    int w = snprintf(out, cap, "numbers %d\n", NUMS);
    len += (size_t)w;
    for (size_t i = 0; i < NUMS; i++) {
        w = snprintf(out + len, cap - len, "%d\n", number(i));
        len += (size_t)w;
    }
    w = snprintf(out + len, cap - len, "blob %zu\n", BLOB);
    len += (size_t)w;
    return len;
}

static void check_file_image(const unsigned char *buf, size_t size, const char *text, size_t text_len,
                             const char *how) {
    if (size != text_len + BLOB) fail("%s: %zu bytes, expected %zu", how, size, text_len + BLOB);
    for (size_t j = 0; j < text_len; j++)
        if (buf[j] != (unsigned char)text[j]) fail("%s: text byte %zu is %d, expected %d", how, j, buf[j], text[j]);
    size_t bad = check_blob(buf + text_len, BLOB);
    if (bad != BLOB) fail("%s: blob byte %zu is %d, expected %d", how, bad, buf[text_len + bad], blob_byte(bad));
}

int main(int argc, char **argv) {
    if (argc != 2) fail("usage: preload_stdio DATAFILE");
    const char *path = argv[1];

    /* 1. Write the file: fprintf through a malloc'd stdio buffer, then fwrite
     * a blob that was stamped long before (mostly evicted by then). */
    unsigned char *blob = xmalloc(BLOB);
    fill_blob(blob, BLOB);
    FILE *f = fopen(path, "w");
    if (!f) fail("fopen(%s, w): %s", path, strerror(errno));
    char *wbuf = xmalloc(1 << 20);
    if (setvbuf(f, wbuf, _IOFBF, 1 << 20) != 0) fail("setvbuf for writing");
    if (fprintf(f, "numbers %d\n", NUMS) < 0) fail("fprintf header");
    for (size_t i = 0; i < NUMS; i++)
        if (fprintf(f, "%d\n", number(i)) < 0) fail("fprintf number %zu", i);
    if (fprintf(f, "blob %zu\n", BLOB) < 0) fail("fprintf blob header");
    if (fwrite(blob, 1, BLOB, f) != BLOB) fail("fwrite blob: %s", strerror(errno));
    if (fclose(f) != 0) fail("fclose after writing: %s", strerror(errno));
    free(wbuf);
    free(blob);

    struct stat st;
    if (stat(path, &st) != 0) fail("stat: %s", strerror(errno));
    size_t size = (size_t)st.st_size;
    size_t text_cap = (size_t)NUMS * 13 + 64;
    char *text = xmalloc(text_cap);
    size_t text_len = expected_text(text, text_cap);
    if (size != text_len + BLOB) fail("file is %zu bytes, expected %zu", size, text_len + BLOB);

    /* 2. fread the whole file into a fresh buffer (large freads go straight
     * to read(2) into the user buffer). */
    unsigned char *whole = xmalloc(size);
    f = fopen(path, "r");
    if (!f) fail("fopen(%s, r): %s", path, strerror(errno));
    size_t got = fread(whole, 1, size, f);
    if (got != size) fail("fread: %zu of %zu bytes (%s)", got, size, ferror(f) ? "error" : "eof");
    fclose(f);
    check_file_image(whole, size, text, text_len, "fread");

    /* 3. fscanf through a large, fresh stdio buffer into a fresh int array,
     * then fread the blob (partly from the stdio buffer, partly direct). */
    int *ints = xmalloc(sizeof(int) * NUMS);
    char *rbuf = xmalloc(STDIO_BUF);
    unsigned char *blob2 = xmalloc(BLOB);
    f = fopen(path, "r");
    if (!f) fail("fopen(%s, r): %s", path, strerror(errno));
    if (setvbuf(f, rbuf, _IOFBF, STDIO_BUF) != 0) fail("setvbuf for reading");
    int n = -1;
    if (fscanf(f, "numbers %d", &n) != 1 || n != NUMS) fail("fscanf header: %d", n);
    for (size_t i = 0; i < NUMS; i++)
        if (fscanf(f, "%d", &ints[i]) != 1) fail("fscanf number %zu: %s", i, ferror(f) ? strerror(errno) : "no match");
    size_t blob_len = 0;
    if (fscanf(f, " blob %zu", &blob_len) != 1 || blob_len != BLOB) fail("fscanf blob header: %zu", blob_len);
    if (fgetc(f) != '\n') fail("no newline after the blob header");
    got = fread(blob2, 1, BLOB, f);
    if (got != BLOB) fail("fread blob: %zu of %zu bytes", got, BLOB);
    if (fgetc(f) != EOF) fail("data after the blob");
    fclose(f);
    for (size_t i = 0; i < NUMS; i++)
        if (ints[i] != number(i)) fail("fscanf number %zu is %d, expected %d", i, ints[i], number(i));
    size_t bad = check_blob(blob2, BLOB);
    if (bad != BLOB) fail("fread blob byte %zu is %d, expected %d", bad, blob2[bad], blob_byte(bad));
    free(rbuf);

    /* 4. read(2) into a fresh buffer at an odd offset, so every page
     * boundary of the file falls mid-page in memory. */
    int fd = open(path, O_RDONLY);
    if (fd < 0) fail("open: %s", strerror(errno));
    unsigned char *raw = xmalloc(size + 1);
    size_t off = 0;
    while (off < size) {
        ssize_t r = read(fd, raw + 1 + off, size - off);
        if (r < 0) fail("read at %zu: %s", off, strerror(errno));
        if (r == 0) fail("read: early EOF at %zu of %zu", off, size);
        off += (size_t)r;
    }
    check_file_image(raw + 1, size, text, text_len, "read(2)");
    if (memcmp(raw + 1, whole, size) != 0) fail("read(2) and fread disagree");
    free(raw);

    /* 5. pread(2) of the blob alone, and readv(2) into three fresh buffers. */
    unsigned char *blob3 = xmalloc(BLOB);
    off = 0;
    while (off < BLOB) {
        ssize_t r = pread(fd, blob3 + off, BLOB - off, (off_t)(text_len + off));
        if (r <= 0) fail("pread at %zu: %s", off, r < 0 ? strerror(errno) : "EOF");
        off += (size_t)r;
    }
    bad = check_blob(blob3, BLOB);
    if (bad != BLOB) fail("pread blob byte %zu is %d, expected %d", bad, blob3[bad], blob_byte(bad));
    free(blob3);

    size_t part[3] = {size / 3 + 5, size / 3 - 7, 0};
    part[2] = size - part[0] - part[1];
    struct iovec iov[3];
    for (int k = 0; k < 3; k++) {
        iov[k].iov_base = xmalloc(part[k]);
        iov[k].iov_len = part[k];
    }
    if (lseek(fd, 0, SEEK_SET) != 0) fail("lseek: %s", strerror(errno));
    ssize_t r = readv(fd, iov, 3);
    if (r < 0) fail("readv: %s", strerror(errno));
    if ((size_t)r != size) fail("readv: %zd of %zu bytes", r, size);
    off = 0;
    for (int k = 0; k < 3; k++) {
        if (memcmp(iov[k].iov_base, whole + off, part[k]) != 0) fail("readv buffer %d differs", k);
        off += part[k];
        free(iov[k].iov_base);
    }
    close(fd);

    free(whole);
    free(ints);
    free(blob2);
    free(text);
    printf("OK stdio numbers=%d blob=%zu file_bytes=%zu\n", NUMS, (size_t)BLOB, size);
    return 0;
}
