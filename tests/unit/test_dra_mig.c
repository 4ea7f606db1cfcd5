/* MIG devices made per claim (--dra-mig): the pool's slices for an 8-GPU
 * node in MIG mode (a counters slice, a slice of placements per GPU, in
 * the API's limits), the names parsed back, and the counter arithmetic
 * checked against the simulated GPU: every set of placements whose
 * counters fit together is one the GPU can make, and one more that does
 * not fit is refused by both. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dra/dra.h"
#include "nvml/nvml.h"
#include "testutil.h"

struct node {
    struct nvml n;
    struct gpu_inventory inv;
    struct gpu_device *devs;
    struct config cfg;
    struct dra_slice_in in;
};

static void node_start(struct node *x, const char *preset)
{
    struct err e;
    memset(x, 0, sizeof *x);
    testutil_sim_start(&x->n, preset);
    assert_int_equal(gpu_inventory_build(&x->n, &x->inv, &e), 0);
    x->devs = gpu_devices_new(&x->inv, 0);
    x->cfg.dra = CONFIG_DRA_ALL;
    snprintf(x->cfg.dra_gpus, sizeof x->cfg.dra_gpus, "*");
    snprintf(x->cfg.dra_mig, sizeof x->cfg.dra_mig, "*");
    x->in = (struct dra_slice_in){.cfg = &x->cfg, .inv = &x->inv, .devs = x->devs, .node = "n",
                                  .node_uid = "u", .generation = 1, .api = DRA_API_V1,
                                  .tainted = true, .consumable = true, .partitionable = true};
}

static void node_stop(struct node *x)
{
    free(x->devs);
    gpu_inventory_free(&x->inv);
    nvml_close(&x->n);
}

static json_t *slice(const struct dra_slice_in *in, unsigned s)
{
    struct strbuf out = {0};
    dra_slice_json(in, s, &out);
    json_t *j = json_loads(out.data, 0, NULL);
    assert_non_null(j);
    strbuf_free(&out);
    return j;
}

static void test_pool_of_slices(void **state)
{
    (void)state;
    struct node x;
    node_start(&x, "h100-mig-empty");
    /* The GPUs, then one counters slice, then a slice per GPU. */
    assert_int_equal(dra_slices(&x.in), 10);
    assert_int_equal(dra_count(&x.in), 8 * 25);
    json_t *first = slice(&x.in, 0), *counters = slice(&x.in, 1), *gpu0 = slice(&x.in, 2);
    assert_int_equal(json_array_size(json_object_get(json_object_get(first, "spec"), "devices")), 0);
    json_t *sets = json_object_get(json_object_get(counters, "spec"), "sharedCounters");
    assert_int_equal(json_array_size(sets), 8);
    assert_null(json_object_get(json_object_get(counters, "spec"), "devices"));
    json_t *set0 = json_array_get(sets, 0);
    assert_string_equal(json_string_value(json_object_get(set0, "name")), "gpu-0-counter-set");
    json_t *c = json_object_get(set0, "counters");
    assert_string_equal(json_string_value(json_object_get(json_object_get(c, "memory"), "value")),
                        "81152Mi"); /* the 7g profile's, as the real H100 says */
    assert_string_equal(json_string_value(json_object_get(json_object_get(c, "compute-slices"),
                                                          "value")), "7");
    assert_non_null(json_object_get(c, "memory-slice-7"));
    assert_true(json_object_size(c) <= 32);
    json_t *devs = json_object_get(json_object_get(gpu0, "spec"), "devices");
    assert_int_equal(json_array_size(devs), 25); /* 7 + 7 + 4 + 3 + 2 + 1 + 1 */
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(json_object_get(gpu0, "spec"), "pool"), "resourceSliceCount")),
                     10);
    bool seen_me = false;
    for (size_t k = 0; k < json_array_size(devs); k++) {
        json_t *d = json_array_get(devs, k);
        const char *name = json_string_value(json_object_get(d, "name"));
        seen_me |= !strcmp(name, "gpu-0-mig-1g10gb-me-20-0");
        assert_true(json_object_size(json_object_get(d, "attributes")) +
                        json_object_size(json_object_get(d, "capacity")) <= 32);
        json_t *use = json_array_get(json_object_get(d, "consumesCounters"), 0);
        assert_string_equal(json_string_value(json_object_get(use, "counterSet")),
                            "gpu-0-counter-set");
        assert_null(json_object_get(json_object_get(d, "attributes"), "uuid"));
    }
    assert_true(seen_me);
    assert_string_equal(json_string_value(json_object_get(json_array_get(devs, 0), "name")),
                        "gpu-0-mig-1g10gb-19-0");
    char name[320];
    dra_slice_name(&x.in, "n", 9, name, sizeof name);
    assert_string_equal(name, "n-gpu.nvidia.com-gpu-7");
    dra_slice_name(&x.in, "n", 1, name, sizeof name);
    assert_string_equal(name, "n-gpu.nvidia.com-counters");
    json_decref(first);
    json_decref(counters);
    json_decref(gpu0);
    /* Without counters in the API (before 1.35, or the gate off): the MIG
     * devices as they are, in one slice. */
    x.in.partitionable = false;
    assert_int_equal(dra_slices(&x.in), 1);
    assert_int_equal(dra_count(&x.in), 0);
    node_stop(&x);
}

static void test_names_round_trip(void **state)
{
    (void)state;
    struct node x;
    node_start(&x, "h100-mig-empty");
    const struct gpu_info *g = &x.inv.gpus[3];
    struct dra_placement pl, back;
    for (unsigned n = 0; dra_placement_at(g, n, &pl); n++) {
        char name[96];
        dra_placement_name(g, pl.profile, pl.start, name, sizeof name);
        assert_true(dra_placement_find(&x.in, name, &back));
        assert_int_equal(back.gpu, 3);
        assert_ptr_equal(back.profile, pl.profile);
        assert_int_equal(back.start, pl.start);
    }
    static const char *const bad[] = {"gpu-3", "gpu-3-mig-1g10gb-19-7", "gpu-3-mig-1g10gb-20-0",
                                      "gpu-3-mig-2g20gb-14-1", "gpu-9-mig-1g10gb-19-0",
                                      "gpu-3-mig-1g10gb-19-0x", "gpu--mig-", ""};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
        assert_false(dra_placement_find(&x.in, bad[k], &back));
    node_stop(&x);
}

/* The DFS over GPU g's placements: each set whose counters fit under its
 * counter set is made on the simulated GPU (it must be), and destroyed. */
struct search {
    struct node *x;
    struct dra_placement pl[32];
    unsigned npl;
    unsigned long long have[DRA_MAX_COUNTERS];
    struct dra_counter set[DRA_MAX_COUNTERS];
    unsigned nset;
    unsigned chosen[8], nchosen;
    unsigned sets;
};

static bool fits(struct search *s, unsigned p, bool take)
{
    struct dra_counter c[DRA_MAX_COUNTERS];
    unsigned n = dra_counters(&s->x->inv.gpus[0], s->pl[p].profile, s->pl[p].start, c);
    for (unsigned k = 0; k < n; k++)
        for (unsigned j = 0; j < s->nset; j++)
            if (!strcmp(c[k].name, s->set[j].name)) {
                if (!take && s->have[j] + c[k].value > s->set[j].value)
                    return false;
                if (take)
                    s->have[j] += c[k].value;
            }
    return true;
}

static void give_back(struct search *s, unsigned p)
{
    struct dra_counter c[DRA_MAX_COUNTERS];
    unsigned n = dra_counters(&s->x->inv.gpus[0], s->pl[p].profile, s->pl[p].start, c);
    for (unsigned k = 0; k < n; k++)
        for (unsigned j = 0; j < s->nset; j++)
            if (!strcmp(c[k].name, s->set[j].name))
                s->have[j] -= c[k].value;
}

/* Makes the chosen set on GPU 0, then destroys it. */
static void make_all(struct search *s)
{
    struct gpu_info g = s->x->inv.gpus[0];
    struct err e;
    unsigned made;
    for (unsigned k = 0; k < s->nchosen; k++) {
        const struct dra_placement *p = &s->pl[s->chosen[k]];
        if (gpu_mig_create(&s->x->n, &g, p->profile->info.id, p->start, &made, &e) < 0)
            fail_msg("counters fit, the GPU refuses %s@%u: %s", p->profile->name, p->start, e.msg);
    }
    assert_int_equal(g.nmig, s->nchosen);
    /* And nothing more fits both ways: a placement the counters refuse,
     * the GPU refuses too. */
    for (unsigned p = 0; p < s->npl; p++) {
        if (fits(s, p, false))
            continue;
        struct gpu_info probe = g;
        if (gpu_mig_create(&s->x->n, &probe, s->pl[p].profile->info.id, s->pl[p].start, &made, &e) == 0)
            fail_msg("counters refuse %s@%u, the GPU makes it", s->pl[p].profile->name, s->pl[p].start);
    }
    while (g.nmig) {
        const struct gpu_mig *m = &g.mig[g.nmig - 1];
        char uuid[96];
        snprintf(uuid, sizeof uuid, "%s", m->uuid);
        assert_int_equal(gpu_mig_destroy(&s->x->n, &g, m->gi, m->ci, uuid, &e), 0);
    }
    s->sets++;
}

static void search(struct search *s, unsigned from)
{
    bool grew = false;
    for (unsigned p = from; p < s->npl && s->nchosen < 7; p++) {
        if (!fits(s, p, false))
            continue;
        fits(s, p, true);
        s->chosen[s->nchosen++] = p;
        search(s, p + 1);
        s->nchosen--;
        give_back(s, p);
        grew = true;
    }
    if (!grew && s->nchosen) /* a set the scheduler could end with */
        make_all(s);
}

static void test_counters_match_the_gpu(void **state)
{
    (void)state;
    static struct node x;
    static struct search s;
    node_start(&x, "h100-mig-empty");
    s.x = &x;
    for (s.npl = 0; dra_placement_at(&x.inv.gpus[0], s.npl, &s.pl[s.npl]); s.npl++)
        ;
    s.nset = dra_counters(&x.inv.gpus[0], NULL, 0, s.set);
    search(&s, 0);
    assert_true(s.sets > 100);
    print_message("%u sets of placements checked\n", s.sets);
    node_stop(&x);
}

static void test_foreign_devices_close_placements(void **state)
{
    (void)state;
    struct node x;
    node_start(&x, "h100-mig-empty");
    testutil_sim_command("mig 0 3g.40gb");
    gpu_mig_read(&x.n, &x.inv.gpus[0]);
    assert_int_equal(x.inv.gpus[0].nmig, 1);
    struct dra_placement pl;
    int at;
    unsigned open = 0, adopted = 0;
    for (unsigned n = 0; dra_placement_at(&x.inv.gpus[0], n, &pl); n++) {
        if (dra_placement_open(&x.in, &pl, &at))
            open++, adopted += at >= 0;
    }
    /* Memory slices 4-7 stay free: 1g.10gb and 1g.10gb+me at 4-6, 1g.20gb
     * at 4 and 6, 2g.20gb at 4, 3g.40gb at 4; and the 3g.40gb at 0, adopted. */
    assert_int_equal(open, 3 + 3 + 2 + 1 + 1 + 1);
    assert_int_equal(adopted, 1);
    /* Once a claim made it, it holds nothing back from the scheduler. */
    char made[1][96];
    snprintf(made[0], sizeof made[0], "%s", x.inv.gpus[0].mig[0].uuid);
    x.in.made = (const char(*)[96])made;
    x.in.nmade = 1;
    open = 0;
    for (unsigned n = 0; dra_placement_at(&x.inv.gpus[0], n, &pl); n++)
        open += dra_placement_open(&x.in, &pl, &at);
    assert_int_equal(open, 25);
    node_stop(&x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_of_slices),
        cmocka_unit_test(test_names_round_trip),
        cmocka_unit_test(test_counters_match_the_gpu),
        cmocka_unit_test(test_foreign_devices_close_placements),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
