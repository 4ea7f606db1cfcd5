/* NVML's ABI without a GPU (issue 42): every struct size, field offset and
 * versioned-struct constant of src/nvml/nvml_abi.h, as tests/abi/abi_layout.c
 * prints them, against the same printed from NVIDIA's own nvml.h
 * (tests/abi/nvml-580.txt). The simulator shares nvml_abi.h with the agent,
 * so no other test can see a layout both get wrong. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define main abi_layout_main
#include "../abi/abi_layout.c"
#undef main

/* abi_layout's lines, printed to stdout, into a file. */
static FILE *abi_ours(void)
{
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    fflush(stdout);
    int saved = dup(1);
    assert_true(saved >= 0 && dup2(fileno(tmp), 1) >= 0);
    abi_layout_main();
    fflush(stdout);
    assert_true(dup2(saved, 1) >= 0);
    close(saved);
    rewind(tmp);
    return tmp;
}

/* The next line of f that is no comment, or NULL at its end. */
static char *abi_line(FILE *f, char *buf, size_t len)
{
    while (fgets(buf, (int)len, f))
        if (buf[0] != '#')
            return buf;
    return NULL;
}

static void test_layout_is_nvidias(void **state)
{
    (void)state;
    FILE *facts = fopen(GPULET_ABI_FACTS, "r"), *ours = abi_ours();
    assert_non_null(facts);
    char want[256], got[256];
    unsigned n = 0;
    for (;;) {
        char *w = abi_line(facts, want, sizeof want), *g = abi_line(ours, got, sizeof got);
        if (!w || !g) {
            if (w || g)
                fail_msg("line %u: %s%s", n + 1, w ? "missing here, NVIDIA has: " : "not in NVIDIA's: ",
                         w ? w : g);
            break;
        }
        if (strcmp(w, g))
            fail_msg("line %u: NVIDIA's nvml.h has %sours has %s", n + 1, w, g);
        n++;
    }
    assert_true(n > 90); /* every struct gpulet declares */
    fclose(facts);
    fclose(ours);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_is_nvidias),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
