/* libFuzzer harness for the ELF soname reader: any bytes as a library
 * file give a soname or -1, never a crash or a read outside the file. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "driver/driver.h"

struct mem {
    const uint8_t *data;
    size_t size;
};

static size_t mem_read(void *ctx, uint64_t off, void *buf, size_t len)
{
    const struct mem *m = ctx;
    if (off >= m->size)
        return 0;
    size_t n = m->size - off < len ? (size_t)(m->size - off) : len;
    memcpy(buf, m->data + off, n);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mem m = {data, size};
    char soname[128];
    if (driver_elf_soname(mem_read, &m, soname, sizeof soname) == 0 &&
        (!soname[0] || strlen(soname) >= sizeof soname))
        __builtin_trap();
    return 0;
}
