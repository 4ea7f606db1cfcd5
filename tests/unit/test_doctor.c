/* gpulet doctor's pure parts: XIDs out of /dev/kmsg records. */
#include <string.h>

#include "doctor/doctor.h"
#include "testutil.h"

static void test_kmsg_xids(void **state)
{
    (void)state;
    const char *log =
        "6,100,2000000,-;nvidia: loading out-of-tree module taints kernel.\n"
        "4,101,5500000,-;NVRM: Xid (PCI:0000:18:00): 79, pid=0, name=, GPU has fallen off the bus.\n"
        " SUBSYSTEM=pci\n"
        "4,102,6000000,c;NVRM: Xid (PCI:0000:9a:00): 13, pid=7, name=python, Graphics Exception\n"
        "4,103,7000000,-;NVRM: Xid (PCI:0000:9a:00): nonsense\n"
        "garbage without a semicolon NVRM: Xid (PCI:0000:18:00): 48\n";
    struct doctor_xid x[4];
    assert_int_equal(doctor_kmsg_xids(log, strlen(log), x, 4), 2);
    assert_string_equal(x[0].pci, "0000:18:00");
    assert_int_equal(x[0].xid, 79);
    assert_true(x[0].seconds > 5.49 && x[0].seconds < 5.51);
    assert_string_equal(x[1].pci, "0000:9a:00");
    assert_int_equal(x[1].xid, 13);
    /* A full buffer keeps the newest. */
    assert_int_equal(doctor_kmsg_xids(log, strlen(log), x, 1), 2);
    assert_int_equal(x[0].xid, 13);
    /* Nothing, and cut records. */
    assert_int_equal(doctor_kmsg_xids("", 0, x, 4), 0);
    const char *cut = "4,1,9;NVRM: Xid (PCI:0000:18:00";
    assert_int_equal(doctor_kmsg_xids(cut, strlen(cut), x, 4), 0);
    const char *nodigits = "4,1,,-;NVRM: Xid (PCI:0000:18:00): 79\n";
    assert_int_equal(doctor_kmsg_xids(nodigits, strlen(nodigits), x, 4), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kmsg_xids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
