/* read_golden.c: read every tensor of a gpt2np golden file without NumPy, zero-copy.
 *
 * A golden file is a ZIP archive (stored, not compressed) of .npy members whose data start at
 * multiples of 64 bytes from the start of the file (docs/golden-files.md). So a reader maps the
 * file, walks the ZIP central directory to each member, reads its .npy header, and casts a
 * pointer: no copy, no decompression, no allocation per tensor.
 *
 *   cc -O2 -std=c99 -o read_golden examples/read_golden.c
 *   ./read_golden golden.npz            one line per tensor: name, dtype, shape, data offset
 *   ./read_golden golden.npz --values   the same lines, each followed by every value
 *
 * POSIX (mmap) and a little-endian machine; ZIP64 records are understood (files past 4 GiB).
 * Exit status 1 with a message on stderr for anything it cannot read.
 */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const uint8_t *base; /* the mapped file */
static uint64_t size;

static void fail(const char *what) {
    fprintf(stderr, "read_golden: %s\n", what);
    exit(1);
}

/* little-endian integers at an offset, checked against the end of the file */
static uint64_t le(uint64_t at, int n) {
    uint64_t v = 0;
    if (at + n > size) fail("a record runs past the end of the file");
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | base[at + i];
    return v;
}

typedef struct {
    char descr[16];
    int ndim;
    uint64_t shape[8];
    uint64_t count; /* elements */
    uint64_t data;  /* offset of the first element in the file */
} Tensor;

/* Parse the .npy header at `at`, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (1, 5), } */
static void parse_npy(uint64_t at, uint64_t member_size, Tensor *t) {
    if (member_size < 10 || memcmp(base + at, "\x93NUMPY", 6) != 0) fail("a member is not .npy");
    int major = base[at + 6];
    uint64_t len = major == 1 ? le(at + 8, 2) : le(at + 8, 4);
    uint64_t start = at + (major == 1 ? 10 : 12);
    if (start + len > at + member_size) fail("an .npy header runs past its member");
    char header[4096];
    if (len >= sizeof header) fail("an .npy header is too long");
    memcpy(header, base + start, len);
    header[len] = 0;
    const char *d = strstr(header, "'descr': '");
    const char *f = strstr(header, "'fortran_order': ");
    const char *s = strstr(header, "'shape': (");
    if (!d || !f || !s) fail("an .npy header lacks descr, fortran_order or shape");
    if (strncmp(f + 17, "False", 5) != 0) fail("Fortran-order data is not supported");
    d += 10;
    size_t n = strcspn(d, "'");
    if (n >= sizeof t->descr) fail("an unknown dtype");
    memcpy(t->descr, d, n);
    t->descr[n] = 0;
    t->ndim = 0;
    t->count = 1;
    for (const char *p = s + 10; *p && *p != ')';) {
        if (*p == ',' || *p == ' ') { p++; continue; }
        char *end;
        unsigned long long dim = strtoull(p, &end, 10);
        if (end == p || t->ndim == 8) fail("a bad shape");
        t->shape[t->ndim++] = dim;
        t->count *= dim;
        p = end;
    }
    t->data = start + len;
}

static int itemsize(const char *descr) {
    if (!strcmp(descr, "<f8") || !strcmp(descr, "<i8")) return 8;
    if (!strcmp(descr, "<f4") || !strcmp(descr, "<i4")) return 4;
    if (!strcmp(descr, "|u1")) return 1;
    return 0;
}

static void print_values(const Tensor *t) {
    const void *p = base + t->data; /* aligned: the cast is safe, no copy is made */
    for (uint64_t i = 0; i < t->count; i++) {
        if (!strcmp(t->descr, "<f4")) printf("%.9g\n", ((const float *)p)[i]);
        else if (!strcmp(t->descr, "<f8")) printf("%.17g\n", ((const double *)p)[i]);
        else if (!strcmp(t->descr, "<i8")) printf("%" PRId64 "\n", ((const int64_t *)p)[i]);
        else if (!strcmp(t->descr, "<i4")) printf("%" PRId32 "\n", ((const int32_t *)p)[i]);
        else printf("%u\n", ((const uint8_t *)p)[i]);
    }
}

int main(int argc, char **argv) {
    if (argc < 2 || (argc == 3 && strcmp(argv[2], "--values") != 0) || argc > 3)
        fail("usage: read_golden FILE [--values]");
    uint16_t one = 1;
    if (*(uint8_t *)&one != 1) fail("this reader assumes a little-endian machine");
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) fail("cannot open the file");
    size = (uint64_t)st.st_size;
    if (size < 22) fail("too short for a ZIP archive");
    base = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (base == MAP_FAILED) fail("cannot map the file");

    /* the end of central directory record: the last 22+ bytes (no comment is written) */
    uint64_t eocd = size - 22;
    while (le(eocd, 4) != 0x06054b50) {
        if (eocd == 0 || size - eocd > 22 + 65535) fail("no ZIP end record");
        eocd--;
    }
    uint64_t entries = le(eocd + 10, 2), dir = le(eocd + 16, 4);
    if (entries == 0xFFFF || dir == 0xFFFFFFFF) { /* ZIP64: its locator sits just before */
        if (eocd < 20 || le(eocd - 20, 4) != 0x07064b50) fail("no ZIP64 locator");
        uint64_t end64 = le(eocd - 12, 8);
        if (le(end64, 4) != 0x06064b50) fail("no ZIP64 end record");
        entries = le(end64 + 32, 8);
        dir = le(end64 + 48, 8);
    }
    for (uint64_t i = 0, at = dir; i < entries; i++) {
        if (le(at, 4) != 0x02014b50) fail("a bad central directory entry");
        uint64_t method = le(at + 10, 2), csize = le(at + 20, 4), usize = le(at + 24, 4);
        uint64_t nname = le(at + 28, 2), nextra = le(at + 30, 2), ncomment = le(at + 32, 2);
        uint64_t local = le(at + 42, 4);
        /* ZIP64 extra field (ID 1): the 64-bit values of the fields that read 0xFFFFFFFF */
        for (uint64_t e = at + 46 + nname; e + 4 <= at + 46 + nname + nextra;) {
            uint64_t id = le(e, 2), n = le(e + 2, 2), q = e + 4;
            if (id == 1) {
                if (usize == 0xFFFFFFFF) { usize = le(q, 8); q += 8; }
                if (csize == 0xFFFFFFFF) { csize = le(q, 8); q += 8; }
                if (local == 0xFFFFFFFF) { local = le(q, 8); }
            }
            e += 4 + n;
        }
        char name[256];
        if (nname >= sizeof name) fail("a member name is too long");
        memcpy(name, base + at + 46, nname);
        name[nname] = 0;
        at += 46 + nname + nextra + ncomment;
        if (method != 0) fail("a compressed member: only stored (uncompressed) files map");
        if (le(local, 4) != 0x04034b50) fail("a bad local header");
        uint64_t start = local + 30 + le(local + 26, 2) + le(local + 28, 2);
        if (start + usize > size) fail("a member runs past the end of the file");
        Tensor t;
        parse_npy(start, usize, &t);
        int item = itemsize(t.descr);
        if (!item) fail("a dtype this reader does not know");
        if (t.data + t.count * item != start + usize) fail("a member's size does not match its shape");
        if (t.data % 64) fail("a tensor's data is not 64-byte aligned");
        if (nname > 4 && !strcmp(name + nname - 4, ".npy")) name[nname - 4] = 0;
        printf("# %s %s [", name, t.descr);
        for (int k = 0; k < t.ndim; k++) printf(k ? ",%" PRIu64 : "%" PRIu64, t.shape[k]);
        printf("] %" PRIu64 "\n", t.data);
        if (argc == 3) print_values(&t);
    }
    munmap((void *)base, size);
    close(fd);
    return 0;
}
