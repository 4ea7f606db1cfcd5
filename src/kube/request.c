/* One blocking request, for the commands that are not the agent (doctor):
 * the agent's requests all go through its client on the loop (client.c). */
#include "kube/internal.h"

#include <stdio.h>
#include <string.h>

void kube_response_free(struct kube_response *r)
{
    strbuf_free(&r->body);
}

struct kube_transfer {
    struct kube_response *r;
    bool too_big;
};

static size_t kube_write(char *data, size_t size, size_t n, void *ctx)
{
    struct kube_transfer *t = ctx;
    if (t->r->body.len + size * n > KUBE_MAX_BODY) {
        t->too_big = true;
        return 0;
    }
    strbuf_append(&t->r->body, data, size * n);
    return size * n;
}

int kube_request(const struct kube_creds *c, const char *method, const char *path,
                 const char *content_type, const char *body, struct kube_response *r,
                 struct err *e)
{
    memset(r, 0, sizeof *r);
    struct kube_transfer t = {r, false};
    char curl_err[CURL_ERROR_SIZE];
    struct curl_slist *headers;
    CURL *h = kube_easy(c, method, path, content_type, body, &headers, curl_err, e);
    if (!h)
        return -1;
    kube_curl.setopt(h, CURLOPT_WRITEFUNCTION, kube_write);
    kube_curl.setopt(h, CURLOPT_WRITEDATA, &t);
    kube_curl.setopt(h, CURLOPT_TIMEOUT_MS, KUBE_TIMEOUT_MS);
    CURLcode rc = kube_curl.perform(h);
    if (rc == CURLE_OK)
        kube_curl.getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
    else
        kube_curl_message(rc, curl_err);
    kube_curl.cleanup(h);
    kube_curl.slist_free(headers);
    if (rc != CURLE_OK) {
        kube_response_free(r);
        r->status = 0;
        if (t.too_big)
            return err_set(e, "%s %s%s: the answer is over %u bytes", method, c->server, path,
                           KUBE_MAX_BODY);
        return err_set(e, "%s %s%s: %s", method, c->server, path, curl_err);
    }
    if (!r->body.data)
        strbuf_append(&r->body, "", 0);
    return 0;
}
