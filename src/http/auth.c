/* Basic auth: the user's bcrypt hash checked with libxcrypt's crypt_rn,
 * loaded with dlopen so that the binary stays glibc-only. */
#include "http/auth.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "util/xmalloc.h"

#define AUTH_CRYPT_LIB "libcrypt.so.1"
#define AUTH_SCRATCH 65536           /* libxcrypt's struct crypt_data is 32 KiB */

int http_auth_init(struct http_auth *a, const struct http_security *sec, struct err *e)
{
    memset(a, 0, sizeof *a);
    a->sec = sec;
    if (!sec->nusers)
        return 0;
    a->dl = dlopen(AUTH_CRYPT_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!a->dl)
        return err_set(e, "basic_auth_users need %s (libxcrypt, for bcrypt): %s", AUTH_CRYPT_LIB,
                       dlerror());
    a->crypt_rn = (char *(*)(const char *, const char *, void *, int))dlsym(a->dl, "crypt_rn");
    if (!a->crypt_rn) {
        dlclose(a->dl);
        a->dl = NULL;
        return err_set(e, "%s lacks crypt_rn (libxcrypt is needed for bcrypt)", AUTH_CRYPT_LIB);
    }
    a->data = xcalloc(1, AUTH_SCRATCH);
    return 0;
}

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

bool http_auth_check(struct http_auth *a, const char *user, const char *password)
{
    if (!user || !password)
        return false;
    for (unsigned i = 0; i < a->sec->nusers; i++) {
        if (strcmp(a->sec->users[i].name, user))
            continue;
        if (a->accepted[i] && auth_equal(a->accepted[i], password))
            return true;
        memset(a->data, 0, AUTH_SCRATCH);
        const char *h = a->crypt_rn(password, a->sec->users[i].hash, a->data, AUTH_SCRATCH);
        if (!h || !auth_equal(h, a->sec->users[i].hash))
            return false;
        free(a->accepted[i]);
        a->accepted[i] = xstrdup(password);
        return true;
    }
    return false;
}

void http_auth_free(struct http_auth *a)
{
    for (unsigned i = 0; i < HTTP_MAX_USERS; i++)
        free(a->accepted[i]);
    free(a->data);
    if (a->dl)
        dlclose(a->dl);
    memset(a, 0, sizeof *a);
}
