/* read_tokenizer_golden.c: read a gpt2np tokenizer golden in its binary form, without a JSON
 * library: the inputs a C tokenizer takes (each case's text and the special tokens it reads as
 * such, or a decode case's ids) and what it must give (the pieces and the ids, or the bytes).
 *
 *   gpt2np dump-tokenizer --format bin --out tokenizer.bin
 *   cc -std=c99 -Wall -Wextra -Werror -o read_tokenizer_golden examples/read_tokenizer_golden.c
 *   ./read_tokenizer_golden tokenizer.bin          one line per case
 *   ./read_tokenizer_golden tokenizer.bin --dump   every field, strings as hex
 *
 * The layout (docs/golden-files.md, "Reading the tokenizer golden from C"): every integer is 4
 * bytes little-endian; a string is its byte count then its UTF-8 bytes; ids are their count then
 * int32 each. "GPT2NPTK", version 1, n_vocab, n_cases, the pattern; then each case: kind (0 text,
 * 1 decode), name, text; a text case: the special tokens (count, strings), the pieces (count;
 * each: special 0/1, text, ids), the ids; a decode case: the ids, the bytes.
 * The file is read byte by byte (any machine's byte order). Every count is checked against the
 * bytes left before it is used. Exit status 1 with a message on stderr for a file it cannot read.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const unsigned char *p;
    uint32_t n;
} bytes_t;

static unsigned char *data; /* the whole file */
static size_t size, at;     /* its size, and where the reader is */
static uint32_t n_vocab;

static void fail(const char *what) {
    fprintf(stderr, "read_tokenizer_golden: %s (at byte %zu)\n", what, at);
    exit(1);
}

static uint32_t u32(void) {
    if (size - at < 4) fail("the file ends inside a number: truncated");
    const unsigned char *b = data + at;
    at += 4;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static bytes_t str(void) {
    bytes_t s;
    s.n = u32();
    if (s.n > size - at) fail("a string runs past the end of the file: truncated or damaged");
    s.p = data + at;
    at += s.n;
    return s;
}

/* A list of ids, each in [0, n_vocab), into out (room for the bytes left / 4); its count. */
static uint32_t ids(int32_t *out) {
    uint32_t n = u32();
    if (n > (size - at) / 4) fail("a list of ids runs past the end of the file: truncated or damaged");
    for (uint32_t i = 0; i < n; i++) {
        uint32_t v = u32(); /* a negative int32 reads as >= 2^31: outside too */
        if (v >= n_vocab) fail("an id outside [0, n_vocab)");
        out[i] = (int32_t)v;
    }
    return n;
}

static void hex(const char *label, bytes_t s) {
    printf("%s ", label);
    for (uint32_t i = 0; i < s.n; i++) printf("%02x", s.p[i]);
    printf("\n");
}

static void print_ids(const char *label, const int32_t *v, uint32_t n) {
    printf("%s", label);
    for (uint32_t i = 0; i < n; i++) printf(" %d", (int)v[i]);
    printf("\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "--dump") != 0)) {
        fprintf(stderr, "usage: read_tokenizer_golden FILE [--dump]\n");
        return 2;
    }
    int dump = argc == 3;
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    long end = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (end < 0 || fseek(f, 0, SEEK_SET) != 0) fail("cannot find the file's size");
    size = (size_t)end;
    data = malloc(size ? size : 1);
    int32_t *all = malloc(size / 4 * sizeof *all + sizeof *all);    /* a case's ids */
    int32_t *pieces = malloc(size / 4 * sizeof *all + sizeof *all); /* its pieces' ids */
    if (!data || !all || !pieces) fail("out of memory");
    if (fread(data, 1, size, f) != size) fail("cannot read the file");
    fclose(f);

    if (size < 8 || memcmp(data, "GPT2NPTK", 8) != 0)
        fail("not a gpt2np tokenizer golden (its first 8 bytes are not GPT2NPTK)");
    at = 8;
    if (u32() != 1) fail("not format version 1");
    n_vocab = u32();
    uint32_t n_cases = u32();
    bytes_t pattern = str();
    if (n_cases > (size - at) / 20) fail("more cases than the file can hold"); /* 20: the least */
    printf("tokenizer golden: version 1, n_vocab %u, %u cases\n", (unsigned)n_vocab, (unsigned)n_cases);
    if (dump) hex("pattern", pattern);
    for (uint32_t c = 0; c < n_cases; c++) {
        uint32_t kind = u32(), n;
        if (kind > 1) fail("a case's kind is neither 0 (text) nor 1 (decode)");
        bytes_t name = str(), text = str();
        if (dump) {
            printf("case %u %s\n", (unsigned)c, kind ? "decode" : "text");
            hex("name", name);
            hex("text", text);
        }
        if (kind == 0) { /* the input: text and special tokens; the output: pieces, ids */
            uint32_t n_special = u32();
            if (n_special > (size - at) / 4) fail("more special tokens than the file can hold");
            for (uint32_t i = 0; i < n_special; i++) {
                bytes_t s = str();
                if (dump) hex("special", s);
            }
            uint32_t n_pieces = u32(), total = 0;
            if (n_pieces > (size - at) / 12) fail("more pieces than the file can hold");
            for (uint32_t i = 0; i < n_pieces; i++) {
                uint32_t special = u32();
                if (special > 1) fail("a piece's special flag is neither 0 nor 1");
                bytes_t piece = str();
                uint32_t k = ids(pieces + total);
                if (dump) {
                    printf("piece %u", (unsigned)special);
                    hex("", piece);
                    print_ids("piece_ids", pieces + total, k);
                }
                total += k;
            }
            n = ids(all);
            if (n != total || (n && memcmp(all, pieces, n * sizeof *all) != 0))
                fail("a text case's ids are not its pieces' ids one after another");
            if (dump) print_ids("ids", all, n);
        } else { /* the input: ids; the output: their bytes (and the text, invalid as U+FFFD) */
            n = ids(all);
            bytes_t b = str();
            if (dump) {
                print_ids("decode", all, n);
                hex("bytes", b);
            }
        }
        if (!dump)
            printf("case %2u %-6s %u ids  %.*s\n", (unsigned)c, kind ? "decode" : "text",
                   (unsigned)n, (int)(name.n < 200 ? name.n : 200), (const char *)name.p);
    }
    if (at != size) fail("bytes after the last case: damaged");
    printf("ok: %u cases\n", (unsigned)n_cases);
    free(data);
    free(all);
    free(pieces);
    return 0;
}
