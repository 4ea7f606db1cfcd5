/* Health: NVIDIA's XID policy and its variables, and the recovery rules. */
#include <string.h>

#include "gpu/health.h"
#include "testutil.h"

static void test_default_policy(void **state)
{
    (void)state;
    struct health_policy p;
    struct err e;
    assert_int_equal(gpu_health_policy_init(&p, NULL, NULL, &e), 0);
    static const unsigned skipped[] = {13, 31, 43, 45, 68, 109};
    for (size_t i = 0; i < 6; i++)
        assert_false(gpu_health_xid_fatal(&p, skipped[i]));
    assert_true(gpu_health_xid_fatal(&p, 79));
    assert_true(gpu_health_xid_fatal(&p, 48));
    assert_true(gpu_health_xid_fatal(&p, 94));
    assert_true(gpu_health_policy_active(&p));
}

static void test_policy_variables(void **state)
{
    (void)state;
    struct health_policy p;
    struct err e;
    assert_int_equal(gpu_health_policy_init(&p, "94,95", NULL, &e), 0);
    assert_false(gpu_health_xid_fatal(&p, 94));
    assert_false(gpu_health_xid_fatal(&p, 13));
    assert_true(gpu_health_xid_fatal(&p, 79));
    assert_int_equal(gpu_health_policy_init(&p, NULL, "13", &e), 0);
    assert_true(gpu_health_xid_fatal(&p, 13)); /* forced over a built-in skip */
    assert_int_equal(gpu_health_policy_init(&p, "all", NULL, &e), 0);
    assert_false(gpu_health_policy_active(&p));
    assert_false(gpu_health_xid_fatal(&p, 79));
    assert_int_equal(gpu_health_policy_init(&p, "xids", "48,79", &e), 0);
    assert_true(gpu_health_policy_active(&p));
    assert_true(gpu_health_xid_fatal(&p, 48));
    assert_true(gpu_health_xid_fatal(&p, 79));
    assert_false(gpu_health_xid_fatal(&p, 94)); /* only the enabled ones */
    assert_int_equal(gpu_health_policy_init(&p, NULL, "all", &e), 0);
    assert_true(gpu_health_xid_fatal(&p, 13));
    assert_int_equal(gpu_health_policy_init(&p, "13,x1", NULL, &e), -1);
    assert_contains(e.msg, "DP_DISABLE_HEALTHCHECKS=13,x1: 'x1' is not an XID number");
    assert_int_equal(gpu_health_policy_init(&p, NULL, "0", &e), -1);
    assert_contains(e.msg, "DP_ENABLE_HEALTHCHECKS");
}

static void test_xid_quiet_period(void **state)
{
    (void)state;
    struct gpu_health h = {0};
    struct health_probe ok = {.answered = true};
    assert_string_equal(gpu_health_name(&h), "Healthy");
    assert_true(gpu_health_on_xid(&h, 94, 1000));
    assert_string_equal(gpu_health_name(&h), "Unhealthy");
    assert_contains(h.detail, "XID 94");
    assert_null(strstr(h.detail, " since ")); /* the cause; the time is since_ms */
    char why[200];
    gpu_health_describe(&h, why, sizeof why);
    assert_contains(why, "XID 94");
    assert_contains(why, " since 20");
    assert_false(gpu_health_on_probe(&h, &ok, 5000, 10000));  /* too soon */
    assert_false(gpu_health_on_xid(&h, 94, 6000));            /* same again: no change */
    assert_false(gpu_health_on_probe(&h, &ok, 15000, 10000)); /* the new event restarted the clock */
    assert_true(gpu_health_on_probe(&h, &ok, 16001, 10000));
    assert_int_equal(h.reason, HEALTH_OK);
    assert_true(gpu_health_on_xid(&h, 94, 0));
    assert_false(gpu_health_on_probe(&h, &ok, 1e12, 0));      /* 0: never by itself */
    assert_true(gpu_health_clear(&h));
    assert_false(gpu_health_clear(&h));
}

static void test_ecc_needs_reset(void **state)
{
    (void)state;
    struct gpu_health h = {0};
    assert_true(gpu_health_on_ecc(&h, 0));
    struct health_probe still = {.answered = true, .dbe_known = true, .dbe = 1};
    struct health_probe reset = {.answered = true, .dbe_known = true, .dbe = 0};
    assert_false(gpu_health_on_probe(&h, &still, 1e9, 1000)); /* time alone does not clear a DBE */
    assert_true(gpu_health_on_probe(&h, &reset, 1e9, 1000));
    assert_true(gpu_health_on_xid(&h, 48, 0));
    assert_int_equal(h.reason, HEALTH_ECC);
}

static void test_lost(void **state)
{
    (void)state;
    struct gpu_health h = {0};
    struct health_probe lost = {.lost = true}, back = {.answered = true};
    assert_true(gpu_health_on_probe(&h, &lost, 0, 1000));
    assert_int_equal(h.reason, HEALTH_LOST);
    assert_false(gpu_health_on_probe(&h, &lost, 1, 1000));
    assert_false(gpu_health_on_xid(&h, 94, 2)); /* a lesser reason does not replace lost */
    assert_int_equal(h.reason, HEALTH_LOST);
    assert_true(gpu_health_on_probe(&h, &back, 3, 1000));
    assert_true(gpu_health_on_xid(&h, 79, 4));
    assert_int_equal(h.reason, HEALTH_LOST);
    assert_contains(h.detail, "XID 79");
}

/* XID 79 alone is no evidence of a reset: a GPU that reported it and never
 * stopped answering stays unhealthy until NVML saw it gone and back. */
static void test_xid79_needs_reset(void **state)
{
    (void)state;
    struct gpu_health h = {0};
    struct health_probe lost = {.lost = true}, back = {.answered = true};
    assert_true(gpu_health_on_xid(&h, 79, 0));
    assert_int_equal(h.reason, HEALTH_LOST);
    assert_false(gpu_health_on_probe(&h, &back, 1e9, 1000)); /* still answering: no reset shown */
    assert_int_equal(h.reason, HEALTH_LOST);
    assert_false(gpu_health_on_probe(&h, &lost, 1e9 + 1, 1000)); /* now NVML sees it gone */
    assert_true(gpu_health_on_probe(&h, &back, 1e9 + 2, 1000));  /* and back: reset */
    assert_int_equal(h.reason, HEALTH_OK);
    assert_true(gpu_health_on_xid(&h, 79, 1e9 + 3));
    assert_true(gpu_health_clear(&h)); /* an operator's word is enough */
    assert_false(h.seen_lost);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_policy), cmocka_unit_test(test_policy_variables),
        cmocka_unit_test(test_xid_quiet_period), cmocka_unit_test(test_ecc_needs_reset),
        cmocka_unit_test(test_lost),             cmocka_unit_test(test_xid79_needs_reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
