#include <stdio.h>
#include <string.h>

#include "grpc/grpc.h"

void grpc_frame(struct strbuf *out, const uint8_t *msg, size_t len)
{
    char prefix[5] = {0, (char)(len >> 24), (char)(len >> 16), (char)(len >> 8), (char)len};
    strbuf_append(out, prefix, sizeof prefix);
    if (len)
        strbuf_append(out, (const char *)msg, len);
}

enum grpc_status grpc_unframe_one(const uint8_t *buf, size_t len, const uint8_t **msg,
                                  size_t *msg_len, const char **why)
{
    if (len < 5)
        return *why = "expected one message, got none", GRPC_INTERNAL;
    if (buf[0] != 0)
        return *why = "compressed messages are not supported", GRPC_UNIMPLEMENTED;
    size_t n = (size_t)buf[1] << 24 | (size_t)buf[2] << 16 | (size_t)buf[3] << 8 | buf[4];
    if (n > GRPC_MAX_MESSAGE)
        return *why = "message larger than 4 MiB", GRPC_RESOURCE_EXHAUSTED;
    if (5 + n != len)
        return *why = 5 + n > len ? "message truncated" : "expected one message, got more",
               GRPC_INTERNAL;
    *msg = buf + 5;
    *msg_len = n;
    return GRPC_OK;
}

void grpc_percent_encode(const char *in, char *out, size_t out_len)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p && o + 4 < out_len; p++) {
        if (*p >= 0x20 && *p <= 0x7e && *p != '%')
            out[o++] = (char)*p;
        else
            o += (size_t)snprintf(out + o, out_len - o, "%%%02X", *p);
    }
    if (out_len)
        out[o < out_len ? o : out_len - 1] = '\0';
}

static int frame_hex(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                        : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

void grpc_percent_decode(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++) {
        int hi, lo;
        if (r[0] == '%' && (hi = frame_hex(r[1])) >= 0 && (lo = frame_hex(r[2])) >= 0) {
            *w++ = (char)(hi << 4 | lo);
            r += 2;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}
