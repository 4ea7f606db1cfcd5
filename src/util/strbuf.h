/* A growable NUL-terminated byte buffer. The owner frees it with strbuf_free. */
#ifndef GPULET_STRBUF_H
#define GPULET_STRBUF_H

#include <stddef.h>

struct strbuf {
    char *data; /* always NUL-terminated once anything was appended */
    size_t len;
    size_t cap;
};

/* Appends len bytes; aborts on out-of-memory, like the rest of gpulet. */
void strbuf_append(struct strbuf *b, const char *s, size_t len);

/* Appends a NUL-terminated string. */
void strbuf_puts(struct strbuf *b, const char *s);

/* Appends formatted text. */
void strbuf_printf(struct strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Releases the buffer and resets it to empty. */
void strbuf_free(struct strbuf *b);

#endif
