/* Basic auth's hashing thread (http/auth.c): bcrypt never runs on the loop,
 * a verified password is remembered, and the queue is bounded. */
#include <stdlib.h>
#include <string.h>

#include "http/auth.h"
#include "testutil.h"
#include "util/xmalloc.h"

/* "s3cret" at bcrypt's lowest cost, as htpasswd -B -C 4 makes it. */
#define HASH "$2b$04$9NMiyi1yp6gZACtftfKxvuKHUONYYVQZNWxXlHV6VAt610.Er6ZWa"

struct fixture {
    uv_loop_t loop;
    uv_async_t done;
    struct http_security sec;
    struct http_auth auth;
    unsigned finished, ok;
};

static void on_done(uv_async_t *h)
{
    struct fixture *f = h->data;
    struct http_auth_job *j = http_auth_finished(&f->auth);
    while (j) {
        struct http_auth_job *next = j->next;
        f->finished++;
        f->ok += j->ok;
        free(j->password);
        free(j);
        j = next;
    }
}

static struct fixture *start(void)
{
    struct fixture *f = xcalloc(1, sizeof *f);
    uv_loop_init(&f->loop);
    uv_async_init(&f->loop, &f->done, on_done);
    f->done.data = f;
    strcpy(f->sec.users[0].name, "prom");
    strcpy(f->sec.users[0].hash, HASH);
    f->sec.nusers = 1;
    struct err e;
    assert_int_equal(http_auth_init(&f->auth, &f->sec, &f->done, &e), 0);
    return f;
}

static void stop(struct fixture *f)
{
    struct http_auth_job *j = http_auth_stop(&f->auth);
    while (j) {
        struct http_auth_job *next = j->next;
        free(j->password);
        free(j);
        j = next;
    }
    http_auth_free(&f->auth);
    uv_close((uv_handle_t *)&f->done, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    free(f);
}

static struct http_auth_job *job(const char *password)
{
    struct http_auth_job *j = xcalloc(1, sizeof *j);
    j->password = xstrdup(password);
    return j;
}

static void test_verified_password_is_remembered(void **state)
{
    (void)state;
    struct fixture *f = start();
    unsigned user = 9;
    assert_int_equal(http_auth_cached(&f->auth, "prom", "s3cret", &user), HTTP_AUTH_HASH);
    assert_int_equal(user, 0);
    assert_int_equal(http_auth_cached(&f->auth, "eve", "s3cret", &user), HTTP_AUTH_DENY);
    assert_int_equal(http_auth_cached(&f->auth, NULL, NULL, &user), HTTP_AUTH_DENY);
    assert_true(http_auth_post(&f->auth, job("wrong")));
    assert_true(http_auth_post(&f->auth, job("s3cret")));
    while (f->finished < 2)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_int_equal(f->ok, 1);
    assert_int_equal(http_auth_cached(&f->auth, "prom", "s3cret", &user), HTTP_AUTH_ALLOW);
    assert_int_equal(http_auth_cached(&f->auth, "prom", "wrong", &user), HTTP_AUTH_HASH);
    stop(f);
}

/* A job counts until the loop takes it back: HTTP_AUTH_QUEUE may wait, the
 * next is refused however fast the thread is, and taken once they are back. */
static void test_queue_is_bounded(void **state)
{
    (void)state;
    struct fixture *f = start();
    for (unsigned i = 0; i < HTTP_AUTH_QUEUE; i++)
        assert_true(http_auth_post(&f->auth, job("wrong")));
    struct http_auth_job *refused = job("wrong");
    assert_false(http_auth_post(&f->auth, refused));
    while (f->finished < HTTP_AUTH_QUEUE)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_int_equal(f->ok, 0);
    assert_true(http_auth_post(&f->auth, refused));
    stop(f); /* hands refused back, finished or not */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verified_password_is_remembered),
        cmocka_unit_test(test_queue_is_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
