/* Basic auth: the user's bcrypt hash checked with libxcrypt's crypt_rn,
 * loaded with dlopen so that the binary stays glibc-only, on a thread of
 * its own (auth.h says why and who touches what). */
#include "http/auth.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "util/xmalloc.h"

#define AUTH_CRYPT_LIB "libcrypt.so.1"
#define AUTH_SCRATCH 65536           /* libxcrypt's struct crypt_data is 32 KiB */

/* Compares in time that depends on the lengths only. */
static bool auth_equal(const char *x, const char *y)
{
    size_t n = strlen(x);
    if (n != strlen(y))
        return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(x[i] ^ y[i]);
    return diff == 0;
}

static void *auth_main(void *arg)
{
    struct http_auth *a = arg;
    pthread_mutex_lock(&a->lock);
    for (;;) {
        while (!a->stop && !a->queue)
            pthread_cond_wait(&a->wake, &a->lock);
        if (a->stop)
            break;
        struct http_auth_job *j = a->queue;
        a->queue = j->next;
        if (!a->queue)
            a->queue_tail = NULL;
        pthread_mutex_unlock(&a->lock);
        const char *hash = a->sec->users[j->user].hash;
        memset(a->data, 0, AUTH_SCRATCH);
        const char *h = a->crypt_rn(j->password, hash, a->data, AUTH_SCRATCH);
        j->ok = h && auth_equal(h, hash);
        pthread_mutex_lock(&a->lock);
        j->next = a->finished;
        a->finished = j;
        uv_async_send(a->notify);
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

int http_auth_init(struct http_auth *a, const struct http_security *sec, uv_async_t *notify,
                   struct err *e)
{
    memset(a, 0, sizeof *a);
    a->sec = sec;
    a->notify = notify;
    if (!sec->nusers)
        return 0;
    a->dl = dlopen(AUTH_CRYPT_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!a->dl)
        return err_set(e, "basic_auth_users need %s (libxcrypt, for bcrypt): %s", AUTH_CRYPT_LIB,
                       dlerror());
    a->crypt_rn = (char *(*)(const char *, const char *, void *, int))dlsym(a->dl, "crypt_rn");
    if (!a->crypt_rn) {
        http_auth_free(a);
        return err_set(e, "%s lacks crypt_rn (libxcrypt is needed for bcrypt)", AUTH_CRYPT_LIB);
    }
    a->data = xcalloc(1, AUTH_SCRATCH);
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->wake, NULL);
    if (pthread_create(&a->thread, NULL, auth_main, a) != 0) {
        http_auth_free(a);
        return err_set(e, "cannot start the thread that checks basic auth passwords");
    }
    a->started = true;
    return 0;
}

enum http_auth_verdict http_auth_cached(const struct http_auth *a, const char *user,
                                        const char *password, unsigned *index)
{
    if (!user || !password)
        return HTTP_AUTH_DENY;
    for (unsigned i = 0; i < a->sec->nusers; i++) {
        if (strcmp(a->sec->users[i].name, user))
            continue;
        *index = i;
        return a->accepted[i] && auth_equal(a->accepted[i], password) ? HTTP_AUTH_ALLOW
                                                                       : HTTP_AUTH_HASH;
    }
    return HTTP_AUTH_DENY;
}

bool http_auth_post(struct http_auth *a, struct http_auth_job *job)
{
    pthread_mutex_lock(&a->lock);
    bool ok = a->started && !a->stop && a->waiting < HTTP_AUTH_QUEUE;
    if (ok) {
        a->waiting++;
        job->ok = false;
        job->next = NULL;
        if (a->queue_tail)
            a->queue_tail->next = job;
        else
            a->queue = job;
        a->queue_tail = job;
        pthread_cond_signal(&a->wake);
    }
    pthread_mutex_unlock(&a->lock);
    return ok;
}

struct http_auth_job *http_auth_finished(struct http_auth *a)
{
    if (!a->started)
        return NULL;
    pthread_mutex_lock(&a->lock);
    struct http_auth_job *done = a->finished;
    a->finished = NULL;
    for (struct http_auth_job *j = done; j; j = j->next)
        a->waiting--;
    pthread_mutex_unlock(&a->lock);
    for (struct http_auth_job *j = done; j; j = j->next) {
        if (!j->ok)
            continue;
        free(a->accepted[j->user]);
        a->accepted[j->user] = xstrdup(j->password);
    }
    return done;
}

struct http_auth_job *http_auth_stop(struct http_auth *a)
{
    if (!a->started)
        return NULL;
    pthread_mutex_lock(&a->lock);
    a->stop = true;
    pthread_cond_signal(&a->wake);
    pthread_mutex_unlock(&a->lock);
    pthread_join(a->thread, NULL);
    a->started = false;
    /* Both lists, the thread gone: the queued ones were never hashed (ok false). */
    struct http_auth_job *all = a->finished;
    if (a->queue_tail) {
        a->queue_tail->next = all;
        all = a->queue;
    }
    a->queue = a->queue_tail = a->finished = NULL;
    a->waiting = 0;
    return all;
}

void http_auth_free(struct http_auth *a)
{
    http_auth_stop(a);
    if (a->data) { /* the lock and cond came with it */
        pthread_mutex_destroy(&a->lock);
        pthread_cond_destroy(&a->wake);
    }
    for (unsigned i = 0; i < HTTP_MAX_USERS; i++)
        free(a->accepted[i]);
    free(a->data);
    if (a->dl)
        dlclose(a->dl);
    memset(a, 0, sizeof *a);
}
