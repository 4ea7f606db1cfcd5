/* Basic auth for the HTTP endpoint, with the web config's bcrypt hashes;
 * internal to src/http. */
#ifndef GPULET_HTTP_AUTH_H
#define GPULET_HTTP_AUTH_H

#include <stdbool.h>

#include "http/http.h"

struct http_auth {
    const struct http_security *sec;
    void *dl;                        /* libcrypt.so.1 (libxcrypt: bcrypt) */
    char *(*crypt_rn)(const char *phrase, const char *setting, void *data, int size);
    void *data;                      /* crypt_rn's scratch */
    char *accepted[HTTP_MAX_USERS];  /* per user: the password last verified */
};

/* Loads libcrypt where sec has users; fails naming it. */
int http_auth_init(struct http_auth *a, const struct http_security *sec, struct err *e);

/* Whether user and password match a configured user. A verified password
 * is remembered, so bcrypt (tens of ms on the loop) runs once per user and
 * password, not per scrape. */
bool http_auth_check(struct http_auth *a, const char *user, const char *password);

void http_auth_free(struct http_auth *a);

#endif
