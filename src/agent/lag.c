/* The loop's own lag: how late it runs a timer due every AGENT_LAG_MS, the
 * worst of the last AGENT_LAG_WINDOW_MS, handed to metrics
 * (gpulet_loop_lag_seconds). Everything the agent serves waits for the
 * loop, so a loop kept busy (a slow call where none belongs) shows on a
 * dashboard, not only in a benchmark. The API client's request counts go
 * to metrics on the same beat. */
#include "agent/internal.h"

#define AGENT_LAG_MS 250
#define AGENT_LAG_WINDOW_MS 10000

static void agent_lag_tick(uv_timer_t *t)
{
    struct agent *a = t->data;
    uint64_t now = uv_hrtime();
    double late = now > a->lag_due_ns ? (double)(now - a->lag_due_ns) / 1e9 : 0;
    if (late > a->lag_worst)
        a->lag_worst = late;
    if (now - a->lag_window_ns >= AGENT_LAG_WINDOW_MS * 1000000ull) {
        a->lag_last_window = a->lag_worst; /* the window just ended */
        a->lag_worst = 0;
        a->lag_window_ns = now;
    }
    a->lag_due_ns = now + AGENT_LAG_MS * 1000000ull;
    metrics_on_loop_lag(a->metrics, a->lag_last_window > a->lag_worst ? a->lag_last_window
                                                                      : a->lag_worst);
    agent_kube_report(a); /* the API client's counts, on the same beat */
}

void agent_lag_start(struct agent *a)
{
    uv_timer_init(&a->loop, &a->lag_timer);
    a->lag_timer.data = a;
    a->lag_window_ns = uv_hrtime();
    a->lag_due_ns = a->lag_window_ns + AGENT_LAG_MS * 1000000ull;
    uv_timer_start(&a->lag_timer, agent_lag_tick, AGENT_LAG_MS, AGENT_LAG_MS);
}
