/* GPU lanes: a thread per GPU, so that a call that hangs on one GPU holds
 * up no other (gpu/lane.c). */
#include <unistd.h>

#include "gpu/lane.h"
#include "testutil.h"

struct sleeper {
    struct gpu_lane_job job;
    unsigned ms;
    int ran;
};

static void sleeper_run(struct gpu_lane_job *job)
{
    struct sleeper *s = (struct sleeper *)job;
    usleep(s->ms * 1000);
    s->ran++;
}

static void test_lanes(void **state)
{
    (void)state;
    struct gpu_lanes *l;
    struct err e;
    assert_int_equal(gpu_lanes_start(&l, 2, &e), 0);
    struct sleeper slow = {.job.run = sleeper_run, .ms = 300}, fast = {.job.run = sleeper_run, .ms = 0},
                   queued = {.job.run = sleeper_run, .ms = 0};
    assert_true(gpu_lanes_post(l, 0, &slow.job));
    assert_false(gpu_lanes_post(l, 0, &slow.job)); /* busy: not twice */
    assert_true(gpu_lanes_post(l, 0, &queued.job)); /* behind it */
    assert_true(gpu_lanes_post(l, 1, &fast.job));
    /* Lane 1 is not held up by lane 0. */
    assert_true(gpu_lanes_wait(l, 1, &fast.job, uv_hrtime() + 100000000ULL));
    assert_int_equal(fast.ran, 1);
    const char *call;
    assert_true(gpu_lanes_busy(l, 0, &call) > 0);
    assert_int_equal(gpu_lanes_busy(l, 1, &call), 0);
    assert_false(gpu_lanes_wait(l, 0, &queued.job, uv_hrtime() + 10000000ULL));
    assert_true(gpu_lanes_wait(l, 0, &queued.job, uv_hrtime() + 2000000000ULL));
    assert_int_equal(slow.ran + queued.ran, 2);
    /* Stop: a job still running past the grace is left, and marked done when it ends. */
    slow.ms = 400;
    assert_true(gpu_lanes_post(l, 0, &slow.job));
    assert_true(gpu_lanes_post(l, 0, &queued.job));
    usleep(50000);
    assert_int_equal(gpu_lanes_stop(l, 10), 1);
    assert_false(gpu_lane_job_busy(&queued.job)); /* dropped, never run */
    assert_int_equal(queued.ran, 1);
    while (gpu_lane_job_busy(&slow.job))
        usleep(10000);
    usleep(20000); /* the left lane lets go of the lanes */
    assert_int_equal(slow.ran, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lanes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
