/* libFuzzer harness for mig-parted's config format: any bytes give the
 * named layouts or one error message, never a crash; each entry found
 * flattens into a layout, and a GPU finds its entry, without one either. */
#include <stddef.h>
#include <stdint.h>

#include "migparted/migparted.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct migparted_file f;
    struct err e;
    e.msg[0] = '\0';
    if (migparted_parse(&f, "config.yaml", (const char *)data, size, &e) < 0) {
        if (!e.msg[0])
            __builtin_trap();
        return 0;
    }
    for (unsigned i = 0; i < f.nconfigs; i++) {
        const struct migparted_config *c = &f.configs[i];
        for (unsigned k = 0; k < c->nentries; k++) {
            struct migparted_layout l;
            if (migparted_layout_of(&c->entries[k], &l, &e) < 0 && !e.msg[0])
                __builtin_trap();
        }
        (void)migparted_entry_for(c, 0, 0x233010DE);
    }
    migparted_free(&f);
    return 0;
}
