#include "util/json.h"

void json_string(struct strbuf *b, const char *s)
{
    strbuf_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': strbuf_puts(b, "\\\""); break;
        case '\\': strbuf_puts(b, "\\\\"); break;
        case '\n': strbuf_puts(b, "\\n"); break;
        case '\r': strbuf_puts(b, "\\r"); break;
        case '\t': strbuf_puts(b, "\\t"); break;
        default:
            if (*p < 0x20)
                strbuf_printf(b, "\\u%04x", *p);
            else
                strbuf_append(b, (const char *)p, 1);
        }
    }
    strbuf_puts(b, "\"");
}
