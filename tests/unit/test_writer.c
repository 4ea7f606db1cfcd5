/* util/writer.c: files written on the worker pool, in order, the newest
 * text only, each waiter told once what it waited for is on disk. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/writer.h"
#include "testutil.h"

/* What the waiters were told, in order. */
struct told {
    unsigned n;
    char text[8][64]; /* the file's text when told ("-" gone, "!" failed) */
    bool written[8];
    const char *path;
    struct writer *close_me; /* closed by the first waiter */
};

static void read_now(const char *path, char *out, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(out, len, "-");
        return;
    }
    size_t n = fread(out, 1, len - 1, f);
    out[n] = '\0';
    fclose(f);
}

static void told_cb(void *ctx, const struct err *e, bool written)
{
    struct told *t = ctx;
    if (e)
        snprintf(t->text[t->n], sizeof t->text[0], "!");
    else
        read_now(t->path, t->text[t->n], sizeof t->text[0]);
    t->written[t->n++] = written;
    if (t->close_me) {
        writer_close(t->close_me);
        t->close_me = NULL;
    }
}

static void put(struct writer *w, const char *text)
{
    struct strbuf b = {0};
    strbuf_puts(&b, text);
    writer_put(w, &b);
    assert_null(b.data); /* moved */
}

static void test_order_and_newest(void **state)
{
    (void)state;
    char dir[] = "/tmp/gpulet-writer-XXXXXX", path[128], tmp[160];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/sub/f.json", dir);
    snprintf(tmp, sizeof tmp, "%s/sub/.f.json.tmp", dir);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct writer *w = writer_new(&loop, path, tmp, 0600, WRITER_MKDIR | WRITER_KEEP_SAME);
    struct told t = {.path = path};
    put(w, "one");            /* under way at once */
    writer_then(w, told_cb, &t);
    put(w, "two");            /* waits for it... */
    put(w, "three");          /* ...and is replaced: two is never written */
    writer_then(w, told_cb, &t);
    assert_true(writer_busy(w));
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(t.n, 2);
    assert_string_equal(t.text[0], "one");
    assert_string_equal(t.text[1], "three");
    assert_true(t.written[0] && t.written[1]);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_not_equal(access(tmp, F_OK), 0); /* no temporary left */
    /* the same text: left as it is */
    put(w, "three");
    writer_then(w, told_cb, &t);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_false(t.written[2]);
    /* nothing under way: told at once */
    writer_then(w, told_cb, &t);
    assert_int_equal(t.n, 4);
    /* removed, in turn */
    put(w, "four");
    writer_remove(w);
    writer_then(w, told_cb, &t);
    t.close_me = w; /* closed while it tells: freed after */
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(t.n, 5);
    assert_string_equal(t.text[4], "-");
    assert_int_equal(uv_loop_close(&loop), 0);
    snprintf(path, sizeof path, "%s/sub", dir);
    assert_int_equal(rmdir(path), 0); /* nothing else was left there */
    assert_int_equal(rmdir(dir), 0);
}

static void test_failure_named(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct told t = {.path = "/proc/gpulet-nope/f"};
    struct writer *w = writer_new(&loop, t.path, "/proc/gpulet-nope/.f", 0644, WRITER_MKDIR);
    put(w, "x");
    writer_then(w, told_cb, &t);
    writer_close(w); /* its write still ends, and its waiter is told */
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(t.n, 1);
    assert_string_equal(t.text[0], "!");
    assert_false(t.written[0]);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_and_newest),
        cmocka_unit_test(test_failure_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
