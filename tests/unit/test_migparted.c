/* mig-parted's config format, parsed with mig-parted's rules; the entry
 * that decides each GPU; a layout flattened in mig-parted's order. */
#include "testutil.h"

#include <string.h>

#include "migparted/migparted.h"

/* Every named form a mig-parted config takes (a GPU Operator-style file:
 * all GPUs, indexes, device filters of one ID or several, MIG off, an
 * empty layout, media and graphics attributes, compute-instance sharing). */
static const char SAMPLE[] =
    "version: v1\n"
    "mig-configs:\n"
    "  all-disabled:\n"
    "    - devices: all\n"
    "      mig-enabled: false\n"
    "  all-enabled:\n"
    "    - devices: all\n"
    "      mig-enabled: true\n"
    "      mig-devices: {}\n"
    "  all-1g.10gb:\n"
    "    - devices: all\n"
    "      mig-enabled: true\n"
    "      mig-devices:\n"
    "        \"1g.10gb\": 7\n"
    "  all-balanced:\n"
    "    - device-filter: [\"0x20B010DE\", \"0x20B110DE\"]\n"
    "      devices: all\n"
    "      mig-enabled: true\n"
    "      mig-devices:\n"
    "        \"1g.5gb\": 2\n"
    "        \"2g.10gb\": 1\n"
    "        \"3g.20gb\": 1\n"
    "    - device-filter: \"0x233010DE\"\n"
    "      devices: all\n"
    "      mig-enabled: true\n"
    "      mig-devices:\n"
    "        \"1g.10gb\": 2\n"
    "        \"2g.20gb\": 1\n"
    "        \"3g.40gb\": 1\n"
    "  custom:\n"
    "    - devices: [0, 1, 2, 3]\n"
    "      mig-enabled: true\n"
    "      mig-devices:\n"
    "        \"1c.3g.40gb\": 3\n"
    "        \"1g.10gb+me\": 1\n"
    "        \"1g.24gb-me\": 0\n"
    "    - devices: [3]\n"
    "      mig-enabled: false\n";

static void test_sample_parses(void **state)
{
    (void)state;
    struct migparted_file f;
    struct err e = {.msg = ""};
    assert_int_equal(migparted_parse(&f, "sample.yaml", SAMPLE, strlen(SAMPLE), &e), 0);
    assert_int_equal(f.nconfigs, 5);
    const struct migparted_config *off = migparted_find(&f, "all-disabled");
    assert_non_null(off);
    assert_true(off->entries[0].all);
    assert_false(off->entries[0].mig_enabled);
    const struct migparted_config *on = migparted_find(&f, "all-enabled");
    assert_true(on->entries[0].mig_enabled);
    assert_int_equal(on->entries[0].ncounts, 0);
    const struct migparted_config *b = migparted_find(&f, "all-balanced");
    assert_int_equal(b->nentries, 2);
    assert_int_equal(b->entries[0].nfilters, 2);
    assert_int_equal(b->entries[0].filters[1], 0x20B110DE);
    assert_int_equal(b->entries[1].nfilters, 1);
    assert_int_equal(b->entries[1].filters[0], 0x233010DE);
    assert_null(migparted_find(&f, "all-3g.40gb"));
    /* the entry for a GPU: its filter and index; the last match wins */
    assert_ptr_equal(migparted_entry_for(b, 5, 0x233010DE), &b->entries[1]);
    assert_ptr_equal(migparted_entry_for(b, 0, 0x20B010DE), &b->entries[0]);
    assert_null(migparted_entry_for(b, 0, 0x234210DE)); /* a product it does not name */
    const struct migparted_config *c = migparted_find(&f, "custom");
    assert_ptr_equal(migparted_entry_for(c, 2, 0x233010DE), &c->entries[0]);
    assert_ptr_equal(migparted_entry_for(c, 3, 0x233010DE), &c->entries[1]);
    assert_null(migparted_entry_for(c, 4, 0x233010DE));
    assert_int_equal(c->entries[0].counts[0].profile.c, 1);
    assert_int_equal(c->entries[0].counts[0].profile.g, 3);
    assert_string_equal(c->entries[0].counts[1].profile.attrs, "me");
    assert_true(c->entries[0].counts[2].profile.negative);
    migparted_free(&f);
}

/* mig-parted's refusals, each naming where. */
static void test_bad_files(void **state)
{
    (void)state;
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"mig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n", "missing 'version'"},
        {"version: v2\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n",
         "unknown version: v2"},
        {"version: v1\n", "at least one entry in 'mig-configs'"},
        {"version: v1\nmig-configs: {}\n", "at least one entry in 'mig-configs'"},
        {"version: v1\nmig-configs:\n  a: []\n", "at least one entry in 'a'"},
        {"version: v1\nextra: 1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n",
         "extra"},
        {"version: v1\nmig-configs:\n  a:\n    - devices: some\n      mig-enabled: false\n",
         "devices must be 'all' or a list"},
        {"version: v1\nmig-configs:\n  a:\n    - devices: [x]\n      mig-enabled: false\n", "GPU index"},
        {"version: v1\nmig-configs:\n  a:\n    - mig-enabled: false\n", "missing required field: devices"},
        {"version: v1\nmig-configs:\n  a:\n    - devices: all\n", "missing required field: mig-enabled"},
        {"version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n",
         "'mig-devices' when 'mig-enabled' is true"},
        {"version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n"
         "      mig-devices: {\"1g.10gb\": 1}\n", "included when 'mig-enabled' is false"},
        {"version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n"
         "      mig-devices: {\"1x.10gb\": 1}\n", "'1x.10gb' is not a MIG profile"},
        {"version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n"
         "      mig-devices: {\"1g.10gb\": -1}\n", "count in mig-devices"},
        {"version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n"
         "      mig-devices: {\"1g.10gb+me-x\": 1}\n", "both '+' and '-'"},
        {"version: v1\nmig-configs:\n  a:\n    - devices: all\n      device-filter: 233010DE\n"
         "      mig-enabled: false\n", "not a PCI device ID"},
        {"version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n"
         "      color: red\n", "unknown key 'color'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct migparted_file f;
        struct err e = {.msg = ""};
        assert_int_equal(migparted_parse(&f, "bad.yaml", bad[i].text, strlen(bad[i].text), &e), -1);
        if (!strstr(e.msg, bad[i].want) || strncmp(e.msg, "bad.yaml", 8))
            fail_msg("case %zu: '%s' does not say '%s'", i, e.msg, bad[i].want);
        assert_null(f.configs);
    }
}

static void test_profiles(void **state)
{
    (void)state;
    static const char *const good[] = {"1g.10gb", "1c.3g.40gb", "1g.10gb+me", "1g.24gb+me.all",
                                       "1g.24gb-me", "7g.80gb", "1g.24gb+gfx"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        struct migparted_profile p;
        struct err e;
        char back[40];
        if (migparted_profile_parse(good[i], &p, &e) < 0)
            fail_msg("%s: %s", good[i], e.msg);
        migparted_profile_name(&p, back, sizeof back);
        assert_string_equal(back, good[i]);
    }
    static const char *const bad[] = {"", "1g", "g.10gb", "1g.10", "0g.10gb", "4c.3g.40gb",
                                      "1c.1g.1g.10gb", "1g.10gb+", "1g.10gb+m..e", "1 g.10gb",
                                      "1g.10gb+me1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct migparted_profile p;
        struct err e;
        if (migparted_profile_parse(bad[i], &p, &e) == 0)
            fail_msg("'%s' parsed", bad[i]);
    }
}

/* Flatten's order: more GPU slices first, then more compute slices. */
static void test_layout_order(void **state)
{
    (void)state;
    struct migparted_entry en = {.mig_enabled = true};
    const char *names[] = {"1g.10gb", "3g.40gb", "1c.3g.40gb", "2g.20gb"};
    const unsigned counts[] = {2, 1, 1, 1};
    for (unsigned i = 0; i < 4; i++) {
        struct err e;
        assert_int_equal(migparted_profile_parse(names[i], &en.counts[i].profile, &e), 0);
        en.counts[i].count = counts[i];
    }
    en.ncounts = 4;
    struct migparted_layout l;
    struct err e;
    assert_int_equal(migparted_layout_of(&en, &l, &e), 0);
    assert_int_equal(l.n, 5);
    char got[5][32];
    for (unsigned i = 0; i < l.n; i++)
        migparted_profile_name(&l.items[i], got[i], sizeof got[i]);
    assert_string_equal(got[0], "3g.40gb");
    assert_string_equal(got[1], "1c.3g.40gb");
    assert_string_equal(got[2], "2g.20gb");
    assert_string_equal(got[3], "1g.10gb");
    assert_string_equal(got[4], "1g.10gb");
    /* the same layout in another order is the same; one fewer is not */
    struct migparted_layout m = l;
    struct migparted_profile t = m.items[0];
    m.items[0] = m.items[4];
    m.items[4] = t;
    assert_true(migparted_layout_same(&l, &m));
    m.n--;
    assert_false(migparted_layout_same(&l, &m));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sample_parses),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_profiles),
        cmocka_unit_test(test_layout_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
