/* GPU lanes: a thread per GPU, so that a call that hangs on one GPU holds
 * up no other (gpu/lane.c). */
#include <semaphore.h>
#include <unistd.h>

#include "gpu/lane.h"
#include "testutil.h"

/* A job that says when it runs and then waits to be let go: what a hung
 * GPU's call does, ended when the test says (no test here waits on time). */
struct held {
    struct gpu_lane_job job;
    sem_t started, go;
    int ran;
};

static void held_run(struct gpu_lane_job *job)
{
    struct held *h = (struct held *)job;
    sem_post(&h->started);
    sem_wait(&h->go);
    h->ran++;
}

struct quick {
    struct gpu_lane_job job;
    int ran;
};

static void quick_run(struct gpu_lane_job *job)
{
    ((struct quick *)job)->ran++;
}

/* Long enough for any machine: only a lane that is held up waits it out. */
static uint64_t soon(void)
{
    return uv_hrtime() + 10 * 1000000000ULL;
}

static void test_lanes(void **state)
{
    (void)state;
    struct gpu_lanes *l;
    struct err e;
    assert_int_equal(gpu_lanes_start(&l, 2, &e), 0);
    struct held hung = {.job.run = held_run};
    sem_init(&hung.started, 0, 0);
    sem_init(&hung.go, 0, 0);
    struct quick fast = {.job.run = quick_run}, queued = {.job.run = quick_run};
    assert_true(gpu_lanes_post(l, 0, &hung.job));
    assert_false(gpu_lanes_post(l, 0, &hung.job)); /* busy: not twice */
    assert_true(gpu_lanes_post(l, 0, &queued.job)); /* behind it */
    assert_true(gpu_lanes_post(l, 1, &fast.job));
    sem_wait(&hung.started);
    /* Lane 1 is not held up by lane 0, which stays in its call meanwhile. */
    assert_true(gpu_lanes_wait(l, 1, &fast.job, soon()));
    assert_int_equal(fast.ran, 1);
    const char *call;
    assert_true(gpu_lanes_busy(l, 0, &call) > 0);
    assert_int_equal(gpu_lanes_busy(l, 1, &call), 0);
    assert_false(gpu_lanes_wait(l, 0, &queued.job, uv_hrtime() + 10000000ULL));
    assert_int_equal(queued.ran, 0);
    sem_post(&hung.go);
    assert_true(gpu_lanes_wait(l, 0, &queued.job, soon()));
    assert_int_equal(hung.ran + queued.ran, 2);
    /* Stop: a job still in its call past the grace is left, and marked done
     * when it ends; the one behind it is dropped, never run. */
    assert_true(gpu_lanes_post(l, 0, &hung.job));
    assert_true(gpu_lanes_post(l, 0, &queued.job));
    sem_wait(&hung.started);
    assert_int_equal(gpu_lanes_stop(l, 10), 1);
    assert_false(gpu_lane_job_busy(&queued.job));
    assert_int_equal(queued.ran, 1);
    sem_post(&hung.go);
    while (gpu_lane_job_busy(&hung.job))
        usleep(1000);
    assert_int_equal(hung.ran, 2);
    usleep(20000); /* tidiness: the left lane lets go of the lanes (its own memory) */
    sem_destroy(&hung.started);
    sem_destroy(&hung.go);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lanes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
