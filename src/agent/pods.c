/* The kubelet's PodResources List, one reader for all who need it:
 * metrics (which pod holds a GPU, for pod labels), DRA (the GPUs pods of
 * a device plugin still hold, kept out of claims) and the MIG manager (a
 * GPU a pod holds keeps its layout). Read at start, every
 * --pod-resources-interval, a moment after an Allocate or a change of the
 * claims, and every AGENT_PODS_HELD_MS while DRA waits for a held GPU to
 * be let go; at most once a second (the kubelet allows 100 a second, and a
 * List a second is plenty). The answer is decoded once and handed to each;
 * a failure is logged once until it answers again. */
#include "agent/internal.h"

#include "grpc/client.h"
#include "podresources.pb-c.h"
#include "util/log.h"

#define AGENT_PODS_GAP_MS 1000
#define AGENT_PODS_TIMEOUT_MS 5000
#define AGENT_PODS_SOON_MS 1000
#define AGENT_PODS_HELD_MS 5000

static void agent_pods_tick(uv_timer_t *t);

/* The next read: the regular interval, sooner while DRA waits. */
static void agent_pods_next(struct agent *a, uint64_t in_ms)
{
    uint64_t every = a->cfg.pod_resources_interval_ms;
    if (dra_waits_for_pods(a->dra) && every > AGENT_PODS_HELD_MS)
        every = AGENT_PODS_HELD_MS;
    uv_timer_start(&a->pods_timer, agent_pods_tick, in_ms < every ? in_ms : every, every);
}

static void agent_pods_done(void *ctx, enum grpc_status st, const char *message,
                            const uint8_t *resp, size_t len)
{
    struct agent *a = ctx;
    a->pods_call = NULL;
    V1__ListPodResourcesResponse *r =
        st == GRPC_OK ? v1__list_pod_resources_response__unpack(NULL, len, resp) : NULL;
    if (!r && !a->pods_failing)
        log_warn("PodResources List on %s failed (%s%s): metrics go without pod labels, and DRA "
                 "offers every GPU, until it answers", a->pods_socket,
                 st == GRPC_OK ? "not a List answer" : "gRPC: ",
                 st == GRPC_OK ? "" : message);
    else if (r && a->pods_failing)
        log_info("PodResources List answers again; pod labels are back");
    a->pods_failing = !r;
    metrics_on_pods(a->metrics, r);
    dra_on_pods(a->dra, r);
    agent_migmgr_on_pods(a, r);
    if (r)
        v1__list_pod_resources_response__free_unpacked(r, NULL);
    agent_pods_next(a, a->cfg.pod_resources_interval_ms);
}

static void agent_pods_tick(uv_timer_t *t)
{
    struct agent *a = t->data;
    uint64_t now = uv_now(&a->loop);
    if (a->pods_call || (!a->metrics && !a->dra && !a->migmgr))
        return;
    if (a->pods_last_ms && now - a->pods_last_ms < AGENT_PODS_GAP_MS) {
        agent_pods_next(a, AGENT_PODS_GAP_MS - (now - a->pods_last_ms));
        return;
    }
    a->pods_last_ms = now;
    config_pod_resources_socket(&a->cfg, a->pods_socket, sizeof a->pods_socket);
    a->pods_call = grpc_client_unary(&a->loop, a->pods_socket, "/v1.PodResourcesLister/List", NULL,
                                     0, AGENT_PODS_TIMEOUT_MS, agent_pods_done, a);
}

void agent_pods_init(struct agent *a)
{
    uv_timer_init(&a->loop, &a->pods_timer);
    a->pods_timer.data = a;
}

void agent_pods_soon(struct agent *a, bool now)
{
    if (!a->stopping)
        agent_pods_next(a, now ? 0 : AGENT_PODS_SOON_MS);
}

void agent_pods_stop(struct agent *a)
{
    grpc_client_cancel(a->pods_call);
    a->pods_call = NULL;
    uv_close((uv_handle_t *)&a->pods_timer, NULL);
}
