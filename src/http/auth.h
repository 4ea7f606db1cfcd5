/* Basic auth for the HTTP endpoint, with the web config's bcrypt hashes;
 * internal to src/http.
 *
 * bcrypt costs tens of milliseconds by design, and anyone who reaches the
 * port can send a wrong password: it never runs on the loop. A password
 * already verified is compared on the loop (constant time); any other goes
 * to the hashing thread, one at a time, while its connection waits
 * suspended. At most HTTP_AUTH_QUEUE wait: past that a request is answered
 * 503 at once, so a flood of wrong passwords costs the loop a compare and
 * the node one core at most.
 *
 * Who touches what: the loop owns the struct and accepted[]; the hashing
 * thread owns data; the queue and the finished list are under lock. */
#ifndef GPULET_HTTP_AUTH_H
#define GPULET_HTTP_AUTH_H

#include <pthread.h>
#include <stdbool.h>
#include <uv.h>

#include "http/http.h"

#define HTTP_AUTH_QUEUE 32

/* One password to hash: made by http.c for a request, lent to the hashing
 * thread from http_auth_post until http_auth_finished hands it back. */
struct http_auth_job {
    void *conn;                      /* http.c's: the suspended connection */
    unsigned user;                   /* index into the web config's users */
    char *password;
    bool ok;                         /* set by the hashing thread */
    struct http_auth_job *next;
};

struct http_auth {
    const struct http_security *sec;
    void *dl;                        /* libcrypt.so.1 (libxcrypt: bcrypt) */
    char *(*crypt_rn)(const char *phrase, const char *setting, void *data, int size);
    void *data;                      /* crypt_rn's scratch: the hashing thread's */
    char *accepted[HTTP_MAX_USERS];  /* per user: the password last verified */
    /* the hashing thread */
    pthread_t thread;
    bool started;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct http_auth_job *queue, *queue_tail, *finished; /* under lock */
    unsigned waiting;                /* under lock: queued, running or finished */
    bool stop;                       /* under lock */
    uv_async_t *notify;              /* sent when a job is finished */
};

enum http_auth_verdict {
    HTTP_AUTH_DENY,                  /* no credentials, or no such user */
    HTTP_AUTH_ALLOW,                 /* the user's password, verified before */
    HTTP_AUTH_HASH,                  /* a password to verify: *user is its user */
};

/* Loads libcrypt and starts the hashing thread where sec has users;
 * notify is sent each time a job is finished. Fails naming what. */
int http_auth_init(struct http_auth *a, const struct http_security *sec, uv_async_t *notify,
                   struct err *e);

/* What the loop can say of user and password without hashing. */
enum http_auth_verdict http_auth_cached(const struct http_auth *a, const char *user,
                                        const char *password, unsigned *index);

/* Queues job for the hashing thread: false (job not taken) when
 * HTTP_AUTH_QUEUE already wait. */
bool http_auth_post(struct http_auth *a, struct http_auth_job *job);

/* The jobs finished since the last call, handed back; a verified password
 * is remembered on the way, so the next request with it is not hashed. */
struct http_auth_job *http_auth_finished(struct http_auth *a);

/* Stops the hashing thread (after the job it runs) and hands back every
 * job it had, finished or not (not: ok false). */
struct http_auth_job *http_auth_stop(struct http_auth *a);

void http_auth_free(struct http_auth *a);

#endif
