/*
 * test_tokenizer.c: the tokenizer's C API on a small vocabulary this test
 * writes (256 byte tokens, the merges "h e" -> 256 and "Ġ he" -> 257,
 * <|endoftext|> = 258): encode and decode through buffers too small and
 * large enough, and the bad inputs (NULL arguments, a closed or forged
 * tokenizer, an id out of range, a missing file, corrupt JSON), each with
 * its status and a message naming what is wrong. With data/gpt2 present
 * (run from the repository root), GPT-2's own ids are checked too, and fed
 * to ag_embedding.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#define CHECK_TOK(call, expected, needle)                                                     \
    do {                                                                                       \
        ag_status st_ = (call);                                                                \
        CHECK_STATUS(st_, expected);                                                           \
        const char *m_ = ag_tokenizer_last_error();                                            \
        if (!check_record(m_ != NULL && strstr(m_, needle) != NULL, __FILE__, __LINE__,        \
                          "message of " #call " names " needle)) {                             \
            fprintf(stderr, "    last error: \"%s\"\n", m_ != NULL ? m_ : "(NULL)");          \
        }                                                                                      \
    } while (0)

static char dir[256];

static void path_of(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", dir, name);
}

/* GPT-2's byte-level alphabet: printable Latin-1 bytes stand for
 * themselves, the others for U+0100 upwards in byte order. */
static unsigned byte_char(unsigned b) {
    unsigned shift = 0;
#define PRINTABLE(x) (((x) >= 0x21 && (x) <= 0x7E) || ((x) >= 0xA1 && (x) <= 0xAC) || ((x) >= 0xAE))
    if (PRINTABLE(b)) return b;
    for (unsigned x = 0; x < b; x++) shift += PRINTABLE(x) ? 0 : 1;
#undef PRINTABLE
    return 0x100 + shift;
}

static void put_utf8(FILE *f, unsigned c) {
    if (c < 0x80) {
        if (c == '"' || c == '\\') fputc('\\', f);
        fputc((int)c, f);
    } else {
        fputc((int)(0xC0 | (c >> 6)), f);
        fputc((int)(0x80 | (c & 0x3F)), f);
    }
}

static void write_file(const char *name, const char *text) {
    char p[512];
    path_of(p, sizeof p, name);
    FILE *f = fopen(p, "wb");
    if (f == NULL) abort();
    fputs(text, f);
    fclose(f);
}

static void write_vocabulary(void) {
    char p[512];
    path_of(p, sizeof p, "vocab.json");
    FILE *f = fopen(p, "wb");
    if (f == NULL) abort();
    fputc('{', f);
    for (unsigned b = 0; b < 256; b++) {
        fputc('"', f);
        put_utf8(f, byte_char(b));
        fprintf(f, "\": %u, ", b);
    }
    fputs("\"he\": 256, \"\xC4\xA0he\": 257, \"<|endoftext|>\": 258}", f);
    fclose(f);
    write_file("merges.txt", "#version: 0.2\nh e\n\xC4\xA0 he\n");
    write_file("corrupt.json", "{\"a\": 0, \"b\": ");
}

static ag_tokenizer *open_small(void) {
    char v[512], m[512];
    path_of(v, sizeof v, "vocab.json");
    path_of(m, sizeof m, "merges.txt");
    ag_tokenizer *t = NULL;
    CHECK_OK(ag_tokenizer_open(v, m, &t));
    return t;
}

static void test_round_trip(void) {
    check_begin("encode and decode");
    ag_tokenizer *t = open_small();
    REQUIRE(t != NULL);
    size_t size = 0;
    int32_t eot = 0;
    CHECK_OK(ag_tokenizer_vocab_size(t, &size));
    CHECK_OK(ag_tokenizer_end_of_text(t, &eot));
    CHECK(size == 259 && eot == 258);

    const uint8_t text[] = "he he<|endoftext|>\xff";
    size_t len = sizeof text - 1, needed = 0;
    int32_t ids[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    CHECK_TOK(ag_tokenizer_encode(t, text, len, true, ids, 3, &needed), AG_STATUS_BUFFER_TOO_SMALL,
              "ag_tokenizer_encode");
    CHECK(needed == 4);
    for (int i = 0; i < 8; i++) CHECK(ids[i] == -1);
    CHECK_OK(ag_tokenizer_encode(t, text, len, true, ids, 4, &needed));
    CHECK(needed == 4 && ids[0] == 256 && ids[1] == 257 && ids[2] == 258 && ids[3] == 0xff);
    CHECK(ids[4] == -1);

    uint8_t bytes[64];
    memset(bytes, 0xEE, sizeof bytes);
    CHECK_TOK(ag_tokenizer_decode(t, ids, 4, bytes, 5, &needed), AG_STATUS_BUFFER_TOO_SMALL,
              "ag_tokenizer_decode");
    CHECK(needed == len && bytes[0] == 0xEE);
    CHECK_OK(ag_tokenizer_decode(t, ids, 4, bytes, sizeof bytes, &needed));
    CHECK(needed == len && memcmp(bytes, text, len) == 0 && bytes[len] == 0xEE);

    /* An id out of range: the message names it and its position. */
    const int32_t bad[] = {104, 259};
    needed = 77;
    CHECK_TOK(ag_tokenizer_decode(t, bad, 2, bytes, sizeof bytes, &needed),
              AG_STATUS_INDEX_OUT_OF_RANGE, "index 259 at position 1");
    CHECK(needed == 77);
    const int32_t negative[] = {-5};
    CHECK_TOK(ag_tokenizer_decode(t, negative, 1, bytes, sizeof bytes, &needed),
              AG_STATUS_INDEX_OUT_OF_RANGE, "index -5");
    CHECK_OK(ag_tokenizer_close(&t));
    CHECK(t == NULL);
}

static void test_bad_inputs(void) {
    check_begin("bad inputs");
    char v[512], m[512], missing[512], corrupt[512];
    path_of(v, sizeof v, "vocab.json");
    path_of(m, sizeof m, "merges.txt");
    path_of(missing, sizeof missing, "missing.json");
    path_of(corrupt, sizeof corrupt, "corrupt.json");
    ag_tokenizer *t = NULL;
    CHECK_TOK(ag_tokenizer_open(v, m, NULL), AG_STATUS_NULL_ARGUMENT, "out");
    CHECK_TOK(ag_tokenizer_open(NULL, m, &t), AG_STATUS_NULL_ARGUMENT, "path");
    CHECK_TOK(ag_tokenizer_open(missing, m, &t), AG_STATUS_IO, "missing.json");
    CHECK_TOK(ag_tokenizer_open(corrupt, m, &t), AG_STATUS_CHECKPOINT_CORRUPT, "encoder.json");
    CHECK(t == NULL);

    t = open_small();
    REQUIRE(t != NULL);
    int32_t ids[4] = {0};
    uint8_t bytes[4];
    size_t needed = 0, size = 0;
    int32_t eot = 0;
    CHECK_TOK(ag_tokenizer_encode(NULL, (const uint8_t *)"he", 2, false, ids, 4, &needed),
              AG_STATUS_NULL_ARGUMENT, "tokenizer");
    CHECK_TOK(ag_tokenizer_encode(t, NULL, 2, false, ids, 4, &needed), AG_STATUS_NULL_ARGUMENT,
              "text");
    CHECK_TOK(ag_tokenizer_encode(t, (const uint8_t *)"he", 2, false, NULL, 4, &needed),
              AG_STATUS_NULL_ARGUMENT, "ids");
    CHECK_TOK(ag_tokenizer_encode(t, (const uint8_t *)"he", 2, false, ids, 4, NULL),
              AG_STATUS_NULL_ARGUMENT, "needed");
    CHECK_TOK(ag_tokenizer_decode(t, NULL, 1, bytes, 4, &needed), AG_STATUS_NULL_ARGUMENT, "ids");
    CHECK_TOK(ag_tokenizer_decode(t, ids, 1, NULL, 4, &needed), AG_STATUS_NULL_ARGUMENT, "bytes");
    CHECK_TOK(ag_tokenizer_vocab_size(t, NULL), AG_STATUS_NULL_ARGUMENT, "out");
    CHECK_TOK(ag_tokenizer_end_of_text(NULL, &eot), AG_STATUS_NULL_ARGUMENT, "tokenizer");

    /* Closed: every call is refused, a second close too; the copy stays. */
    ag_tokenizer *copy = t;
    CHECK_OK(ag_tokenizer_close(&t));
    CHECK(t == NULL);
    CHECK_OK(ag_tokenizer_close(&t));
    CHECK_OK(ag_tokenizer_close(NULL));
    ag_tokenizer *again = copy;
    CHECK_TOK(ag_tokenizer_close(&again), AG_STATUS_INVALID_HANDLE, "not open");
    CHECK(again == copy);
    CHECK_TOK(ag_tokenizer_encode(copy, (const uint8_t *)"he", 2, false, ids, 4, &needed),
              AG_STATUS_INVALID_HANDLE, "ag_tokenizer_encode");
    CHECK_TOK(ag_tokenizer_decode(copy, ids, 1, bytes, 4, &needed), AG_STATUS_INVALID_HANDLE,
              "ag_tokenizer_decode");
    CHECK_TOK(ag_tokenizer_vocab_size(copy, &size), AG_STATUS_INVALID_HANDLE,
              "ag_tokenizer_vocab_size");

    /* Forged: a pointer to real memory that is no tokenizer. */
    ag_tokenizer *forged = (ag_tokenizer *)(void *)bytes;
    CHECK_TOK(ag_tokenizer_end_of_text(forged, &eot), AG_STATUS_INVALID_HANDLE, "not open");
    CHECK_TOK(ag_tokenizer_close(&forged), AG_STATUS_INVALID_HANDLE, "not open");
    CHECK(strcmp(ag_status_str(AG_STATUS_BUFFER_TOO_SMALL), "output buffer too small") == 0);
}

/* GPT-2's vocabulary, when installed: known ids, which ag_embedding takes. */
static void test_gpt2(void) {
    check_begin("GPT-2 vocabulary");
    const char *v = "data/gpt2/encoder.json", *m = "data/gpt2/vocab.bpe";
    if (access(v, R_OK) != 0 || access(m, R_OK) != 0) {
        printf("skipped: data/gpt2 is absent (make tokenizer-data)\n");
        CHECK(getenv("CI") == NULL);
        return;
    }
    ag_tokenizer *t = NULL;
    REQUIRE_OK(ag_tokenizer_open(v, m, &t));
    int32_t ids[4];
    size_t n = 0;
    CHECK_OK(ag_tokenizer_encode(t, (const uint8_t *)"Hello world", 11, false, ids, 4, &n));
    CHECK(n == 2 && ids[0] == 15496 && ids[1] == 995);

    ag_context *c = NULL;
    REQUIRE_OK(ag_context_new(&c));
    check_set_ctx(c);
    size_t vocab = 0;
    CHECK_OK(ag_tokenizer_vocab_size(t, &vocab));
    const size_t shape[2] = {vocab, 1};
    float *w = calloc(vocab, sizeof *w);
    REQUIRE(w != NULL);
    w[15496] = 1.5f;
    w[995] = 2.5f;
    ag_tensor wt, e;
    CHECK_OK(ag_param_new(c, shape, 2, w, &wt));
    CHECK_OK(ag_embedding(c, wt, ids, n, &e));
    float out[2] = {0};
    CHECK_OK(ag_tensor_read(c, e, out, 2));
    CHECK(out[0] == 1.5f && out[1] == 2.5f);
    free(w);
    CHECK_OK(ag_context_free(&c));
    CHECK_OK(ag_tokenizer_close(&t));
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/ag_tokenizer_c_XXXXXX", tmp != NULL ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    write_vocabulary();
    test_round_trip();
    test_bad_inputs();
    test_gpt2();
    const char *names[] = {"vocab.json", "merges.txt", "corrupt.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char p[512];
        path_of(p, sizeof p, names[i]);
        remove(p);
    }
    rmdir(dir);
    return check_summary();
}
