/* The simulated NVML, driven through the same loader as production: init
 * reference counting, the error codes of misuse, live values, and fault
 * injection through the control socket into the NVML event API. */
#include <dlfcn.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define SYM(n, name) ((__typeof__(&name))dlsym((n)->dl, #name))

static struct nvml nv;

static nvmlDevice_t gpu(unsigned i)
{
    nvmlDevice_t d = NULL;
    assert_int_equal(nv.DeviceGetHandleByIndex(i, &d), NVML_SUCCESS);
    return d;
}

static int setup(void **state)
{
    (void)state;
    testutil_sim_start(&nv, "dgx-h100");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    nvml_close(&nv);
    return 0;
}

static void test_refcount(void **state)
{
    (void)state;
    unsigned count;
    assert_int_equal(nv.Init(), NVML_SUCCESS); /* second reference */
    assert_int_equal(nv.Shutdown(), NVML_SUCCESS);
    assert_int_equal(nv.DeviceGetCount(&count), NVML_SUCCESS); /* still one left */
    assert_int_equal(count, 8);
    assert_int_equal(nv.Shutdown(), NVML_SUCCESS);
    assert_int_equal(nv.DeviceGetCount(&count), NVML_ERROR_UNINITIALIZED);
    assert_int_equal(nv.Shutdown(), NVML_ERROR_UNINITIALIZED);
    assert_int_equal(nv.Init(), NVML_SUCCESS); /* back to one reference for the rest */
}

static void test_misuse_codes(void **state)
{
    (void)state;
    nvmlDevice_t d;
    char small[8], name[96];
    assert_int_equal(nv.DeviceGetCount(NULL), NVML_ERROR_INVALID_ARGUMENT);
    assert_int_equal(nv.DeviceGetHandleByIndex(8, &d), NVML_ERROR_INVALID_ARGUMENT);
    assert_int_equal(nv.DeviceGetName((nvmlDevice_t)name, name, sizeof name),
                     NVML_ERROR_INVALID_ARGUMENT);
    assert_int_equal(nv.DeviceGetUUID(gpu(0), small, sizeof small), NVML_ERROR_INSUFFICIENT_SIZE);
    assert_int_equal(nv.DeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &d),
                     NVML_ERROR_NOT_FOUND);
    /* The codes below are what driver 580 answers for the same misuse (docs/real-gpu.md). */
    nvmlMemory_v2_t m = {.version = 1};
    assert_int_equal(nv.DeviceGetMemoryInfoV2(gpu(0), &m), NVML_ERROR_FUNCTION_NOT_FOUND);
    unsigned clock;
    assert_int_equal(SYM(&nv, nvmlDeviceGetClockInfo)(gpu(0), (nvmlClockType_t)99, &clock),
                     NVML_ERROR_NOT_SUPPORTED);
    /* An exported function the simulator does not model answers NOT_SUPPORTED. */
    nvmlReturn_t (*fan)(nvmlDevice_t, unsigned *) = (__typeof__(fan))dlsym(nv.dl, "nvmlDeviceGetFanSpeed");
    unsigned speed;
    assert_non_null(fan);
    assert_int_equal(fan(gpu(0), &speed), NVML_ERROR_NOT_SUPPORTED);
    assert_string_equal(nv.ErrorString(NVML_ERROR_GPU_IS_LOST), "GPU is lost");
    assert_string_equal(nv.ErrorString(NVML_ERROR_RESET_REQUIRED), "GPU requires reset");
}

static void test_identity(void **state)
{
    (void)state;
    char uuid[96], name[96];
    nvmlDevice_t d = gpu(3), by_uuid, by_bus;
    assert_int_equal(nv.DeviceGetUUID(d, uuid, sizeof uuid), NVML_SUCCESS);
    assert_int_equal(nv.DeviceGetHandleByUUID(uuid, &by_uuid), NVML_SUCCESS);
    assert_ptr_equal(by_uuid, d);
    nvmlPciInfo_t pci;
    assert_int_equal(nv.DeviceGetPciInfo(d, &pci), NVML_SUCCESS);
    assert_int_equal(SYM(&nv, nvmlDeviceGetHandleByPciBusId_v2)(pci.busId, &by_bus), NVML_SUCCESS);
    assert_ptr_equal(by_bus, d);
    assert_int_equal(pci.pciDeviceId, 0x233010DE);
    assert_int_equal(nv.DeviceGetName(d, name, sizeof name), NVML_SUCCESS);
    assert_string_equal(name, "NVIDIA H100 80GB HBM3");
    unsigned cur, pending;
    assert_int_equal(nv.DeviceGetMigMode(d, &cur, &pending), NVML_SUCCESS);
    assert_int_equal(cur, NVML_DEVICE_MIG_DISABLE);
    char version[80];
    assert_int_equal(nv.SystemGetNVMLVersion(version, sizeof version), NVML_SUCCESS);
    assert_string_equal(version, "13.580.159.04"); /* as driver 580 answers */
}

static void test_live_values(void **state)
{
    (void)state;
    nvmlDevice_t d = gpu(1);
    nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
    nvmlMemory_t m1;
    assert_int_equal(nv.DeviceGetMemoryInfoV2(d, &m2), NVML_SUCCESS);
    assert_int_equal(nv.DeviceGetMemoryInfo(d, &m1), NVML_SUCCESS);
    assert_int_equal(m2.total, 81559ULL << 20);
    assert_int_equal(m2.used + m2.free + m2.reserved, m2.total);
    assert_int_equal(m1.total, m2.total);
    assert_true(m1.used >= m2.reserved); /* v1 counts reserved memory as used */
    unsigned long long e1, e2;
    __typeof__(&nvmlDeviceGetTotalEnergyConsumption) energy =
        SYM(&nv, nvmlDeviceGetTotalEnergyConsumption);
    assert_int_equal(energy(d, &e1), NVML_SUCCESS);
    usleep(30 * 1000);
    assert_int_equal(energy(d, &e2), NVML_SUCCESS);
    assert_true(e2 > e1); /* at least idle power for 30 ms */
    nvmlUtilization_t u;
    unsigned temp;
    assert_int_equal(SYM(&nv, nvmlDeviceGetUtilizationRates)(d, &u), NVML_SUCCESS);
    assert_true(u.gpu <= 100);
    assert_string_equal(testutil_sim_command("set 1 utilization.gpu=80 temperature.gpu=91"), "ok\n");
    assert_int_equal(SYM(&nv, nvmlDeviceGetUtilizationRates)(d, &u), NVML_SUCCESS);
    assert_int_equal(u.gpu, 80);
    assert_int_equal(SYM(&nv, nvmlDeviceGetTemperature)(d, NVML_TEMPERATURE_GPU, &temp), NVML_SUCCESS);
    assert_int_equal(temp, 91);
    /* A bad field leaves the good one before it unapplied too: all or nothing. */
    assert_contains(testutil_sim_command("set 1 temperature.gpu=50 power.draw=-3"),
                    "error: power.draw must be a number");
    assert_int_equal(SYM(&nv, nvmlDeviceGetTemperature)(d, NVML_TEMPERATURE_GPU, &temp), NVML_SUCCESS);
    assert_int_equal(temp, 91);
    assert_string_equal(testutil_sim_command("set 1 temperature.gpu=auto utilization.gpu=auto"), "ok\n");
}

static nvmlReturn_t wait_event(nvmlEventSet_t set, nvmlEventData_t *ev, unsigned ms)
{
    memset(ev, 0, sizeof *ev);
    return nv.EventSetWait(set, ev, ms);
}

static void test_events_and_faults(void **state)
{
    (void)state;
    nvmlEventSet_t set;
    nvmlEventData_t ev;
    assert_int_equal(nv.EventSetCreate(&set), NVML_SUCCESS);
    for (unsigned i = 0; i < 3; i++)
        assert_int_equal(nv.DeviceRegisterEvents(gpu(i), nvmlEventTypeXidCriticalError |
                                                             nvmlEventTypeDoubleBitEccError, set),
                         NVML_SUCCESS);
    assert_int_equal(wait_event(set, &ev, 10), NVML_ERROR_TIMEOUT);

    assert_string_equal(testutil_sim_command("xid 2 31"), "ok\n");
    assert_int_equal(wait_event(set, &ev, 1000), NVML_SUCCESS);
    assert_ptr_equal(ev.device, gpu(2));
    assert_int_equal(ev.eventType, nvmlEventTypeXidCriticalError);
    assert_int_equal(ev.eventData, 31);
    assert_int_equal(ev.gpuInstanceId, 0xFFFFFFFFU);

    assert_string_equal(testutil_sim_command("xid 5 31"), "ok\n"); /* GPU 5 not registered */
    assert_int_equal(wait_event(set, &ev, 20), NVML_ERROR_TIMEOUT);

    unsigned long long vol, agg;
    __typeof__(&nvmlDeviceGetTotalEccErrors) ecc = SYM(&nv, nvmlDeviceGetTotalEccErrors);
    assert_string_equal(testutil_sim_command("ecc 1"), "ok\n");
    assert_int_equal(wait_event(set, &ev, 1000), NVML_SUCCESS);
    assert_int_equal(ev.eventType, nvmlEventTypeDoubleBitEccError);
    assert_int_equal(wait_event(set, &ev, 1000), NVML_SUCCESS);
    assert_int_equal(ev.eventData, 48);
    assert_int_equal(ecc(gpu(1), NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &vol), NVML_SUCCESS);
    assert_int_equal(vol, 1);

    nvmlDevice_t lost = gpu(0);
    char uuid[96];
    assert_string_equal(testutil_sim_command("lose 0"), "ok\n");
    assert_int_equal(wait_event(set, &ev, 1000), NVML_SUCCESS);
    assert_int_equal(ev.eventData, 79);
    assert_int_equal(wait_event(set, &ev, 1000), NVML_ERROR_GPU_IS_LOST);
    assert_int_equal(wait_event(set, &ev, 10), NVML_ERROR_TIMEOUT); /* reported once */
    assert_int_equal(nv.DeviceGetUUID(lost, uuid, sizeof uuid), NVML_ERROR_GPU_IS_LOST);
    nvmlDevice_t d;
    assert_int_equal(nv.DeviceGetHandleByIndex(0, &d), NVML_ERROR_GPU_IS_LOST);

    /* A reset: the GPU answers again; volatile counters restart, aggregate ones stay. */
    assert_string_equal(testutil_sim_command("recover 0"), "ok\n");
    assert_string_equal(testutil_sim_command("recover 1"), "ok\n");
    assert_int_equal(nv.DeviceGetUUID(lost, uuid, sizeof uuid), NVML_SUCCESS);
    assert_int_equal(ecc(gpu(1), NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &vol), NVML_SUCCESS);
    assert_int_equal(ecc(gpu(1), NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC, &agg), NVML_SUCCESS);
    assert_int_equal(vol, 0);
    assert_int_equal(agg, 1);

    assert_int_equal(nv.EventSetFree(set), NVML_SUCCESS);
    assert_int_equal(nv.EventSetFree(set), NVML_ERROR_INVALID_ARGUMENT);
}

static void test_control_errors(void **state)
{
    (void)state;
    assert_contains(testutil_sim_command("xid 9 31"), "error: no GPU '9'");
    assert_contains(testutil_sim_command("xid 1 0"), "error: usage: xid GPU XID");
    assert_contains(testutil_sim_command("explode 1"), "error: unknown command 'explode'");
    assert_contains(testutil_sim_command("set 1 fan=3"), "error: unknown field 'fan'");
    assert_contains(testutil_sim_command("set 1 temperature.gpu"), "error: expected FIELD=VALUE");
    assert_contains(testutil_sim_command(""), "error: empty command");
    assert_contains(testutil_sim_command("ping"), "ok dgx-h100 8");
}

static void test_topology(void **state)
{
    (void)state;
    nvmlGpuTopologyLevel_t level;
    assert_int_equal(nv.DeviceGetTopologyCommonAncestor(gpu(0), gpu(1), &level), NVML_SUCCESS);
    assert_int_equal(level, NVML_TOPOLOGY_NODE);
    assert_int_equal(nv.DeviceGetTopologyCommonAncestor(gpu(0), gpu(4), &level), NVML_SUCCESS);
    assert_int_equal(level, NVML_TOPOLOGY_SYSTEM);
    nvmlEnableState_t active;
    assert_int_equal(nv.DeviceGetNvLinkState(gpu(0), 17, &active), NVML_SUCCESS);
    assert_int_equal(active, NVML_FEATURE_ENABLED);
    assert_int_equal(nv.DeviceGetNvLinkState(gpu(0), 18, &active), NVML_ERROR_INVALID_ARGUMENT);
    nvmlIntNvLinkDeviceType_t type;
    assert_int_equal(nv.DeviceGetNvLinkRemoteDeviceType(gpu(0), 3, &type), NVML_SUCCESS);
    assert_int_equal(type, NVML_NVLINK_DEVICE_TYPE_SWITCH);
    /* As driver 580 reports an NVSwitch's end of a link: no PCI address. */
    nvmlPciInfo_t pci;
    assert_int_equal(nv.DeviceGetNvLinkRemotePciInfo(gpu(0), 3, &pci), NVML_SUCCESS);
    assert_string_equal(pci.busId, "FFFFFFFF:FF:FF.0");
}

/* Processes: `sim proc`, NVML's running processes and utilization samples,
 * with NVML's size protocol. */
static void test_processes(void **state)
{
    (void)state;
    nvmlDevice_t d = gpu(2);
    unsigned n = 0;
    assert_int_equal(nv.DeviceGetComputeRunningProcesses(d, &n, NULL), NVML_SUCCESS);
    assert_int_equal(n, 0);
    assert_string_equal(testutil_sim_command("proc 2 add 4242 2048 30"), "ok\n");
    assert_string_equal(testutil_sim_command("proc 2 add 4343 1024"), "ok\n");
    assert_string_equal(testutil_sim_command("proc 2 add 4242 4096 60"), "ok\n"); /* update */
    nvmlProcessInfo_t infos[4];
    n = 1;
    assert_int_equal(nv.DeviceGetComputeRunningProcesses(d, &n, infos), NVML_ERROR_INSUFFICIENT_SIZE);
    assert_int_equal(n, 2);
    n = 4;
    assert_int_equal(nv.DeviceGetComputeRunningProcesses(d, &n, infos), NVML_SUCCESS);
    assert_int_equal(n, 2);
    assert_int_equal(infos[0].pid, 4242);
    assert_true(infos[0].usedGpuMemory == 4096ULL << 20);
    nvmlProcessUtilizationSample_t samples[4];
    n = 0;
    assert_int_equal(nv.DeviceGetProcessUtilization(d, NULL, &n, 0), NVML_ERROR_INSUFFICIENT_SIZE);
    assert_int_equal(n, 2);
    n = 4;
    assert_int_equal(nv.DeviceGetProcessUtilization(d, samples, &n, 0), NVML_SUCCESS);
    assert_int_equal(n, 2);
    assert_int_equal(samples[0].smUtil, 60);
    n = 4;
    assert_int_equal(nv.DeviceGetProcessUtilization(d, samples, &n, ~0ULL), NVML_ERROR_NOT_FOUND);
    assert_contains(testutil_sim_command("proc 2 add 1 999999"), "MEM_MIB at most the GPU's 81559");
    assert_contains(testutil_sim_command("proc 2 del 7"), "no process 7 on this GPU");
    assert_contains(testutil_sim_command("proc 2 frob 7"), "usage: proc GPU add");
    assert_string_equal(testutil_sim_command("proc 2 del 4343"), "ok\n");
    n = 4;
    assert_int_equal(nv.DeviceGetComputeRunningProcesses(d, &n, infos), NVML_SUCCESS);
    assert_int_equal(n, 1);
    assert_string_equal(testutil_sim_command("proc 2 clear"), "ok\n");
    n = 4;
    assert_int_equal(nv.DeviceGetComputeRunningProcesses(d, &n, infos), NVML_SUCCESS);
    assert_int_equal(n, 0);
}

/* GPU instances made and destroyed through NVML (issue 52's simulator
 * bugs): a handle keeps naming its own instance when one before it goes,
 * and a new instance takes the lowest free ID. */
static void test_instances_keep_their_handles(void **state)
{
    (void)state;
    struct nvml m;
    nvml_close(&nv); /* this test's own node: a MIG H100 with no instance */
    testutil_sim_start(&m, "h100-mig-empty");
    nvmlDevice_t d = NULL;
    assert_int_equal(m.DeviceGetHandleByIndex(0, &d), NVML_SUCCESS);
    nvmlGpuInstanceProfileInfo_t p;
    assert_int_equal(m.DeviceGetGpuInstanceProfileInfo(d, NVML_GPU_INSTANCE_PROFILE_1_SLICE, &p),
                     NVML_SUCCESS);
    nvmlGpuInstance_t gi[3];
    for (unsigned k = 0; k < 3; k++) {
        nvmlGpuInstancePlacement_t at = {k, 1};
        assert_int_equal(m.DeviceCreateGpuInstanceWithPlacement(d, p.id, &at, &gi[k]), NVML_SUCCESS);
    }
    nvmlGpuInstanceInfo_t info;
    assert_int_equal(m.GpuInstanceDestroy(gi[0]), NVML_SUCCESS);
    for (unsigned k = 1; k < 3; k++) {
        assert_int_equal(m.GpuInstanceGetInfo(gi[k], &info), NVML_SUCCESS);
        assert_int_equal(info.id, k + 1);   /* not the one after it */
        assert_int_equal(info.placement.start, k);
    }
    assert_int_equal(m.GpuInstanceGetInfo(gi[0], &info), NVML_ERROR_NOT_FOUND);
    nvmlGpuInstance_t again;
    nvmlGpuInstancePlacement_t at = {0, 1};
    assert_int_equal(m.DeviceCreateGpuInstanceWithPlacement(d, p.id, &at, &again), NVML_SUCCESS);
    assert_int_equal(m.GpuInstanceGetInfo(again, &info), NVML_SUCCESS);
    assert_int_equal(info.id, 1); /* the lowest free */
    /* mig-parted's calls: without a placement the first with room; the
     * instances of a profile; compute instances; the mode. */
    nvmlGpuInstance_t fourth, list[8];
    assert_int_equal(SYM(&m, nvmlDeviceCreateGpuInstance)(d, p.id, &fourth), NVML_SUCCESS);
    assert_int_equal(m.GpuInstanceGetInfo(fourth, &info), NVML_SUCCESS);
    assert_int_equal(info.placement.start, 3);
    assert_int_equal(info.id, 4);
    unsigned n = 8;
    assert_int_equal(SYM(&m, nvmlDeviceGetGpuInstances)(d, p.id, list, &n), NVML_SUCCESS);
    assert_int_equal(n, 4);
    nvmlComputeInstanceProfileInfo_t cp;
    assert_int_equal(m.GpuInstanceGetComputeInstanceProfileInfo(fourth, 0 /* 1 slice */, 0, &cp),
                     NVML_SUCCESS);
    nvmlComputeInstance_t ci, cis[2];
    assert_int_equal(m.GpuInstanceCreateComputeInstance(fourth, cp.id, &ci), NVML_SUCCESS);
    n = 2;
    assert_int_equal(SYM(&m, nvmlGpuInstanceGetComputeInstances)(fourth, cp.id, cis, &n), NVML_SUCCESS);
    assert_int_equal(n, 1);
    nvmlReturn_t activation;
    assert_int_equal(SYM(&m, nvmlDeviceSetMigMode)(d, NVML_DEVICE_MIG_DISABLE, &activation),
                     NVML_ERROR_IN_USE); /* instances left */
    assert_int_equal(m.ComputeInstanceDestroy(ci), NVML_SUCCESS);
    assert_int_equal(m.GpuInstanceDestroy(fourth), NVML_SUCCESS);
    for (unsigned k = 1; k < 3; k++)
        assert_int_equal(m.GpuInstanceDestroy(gi[k]), NVML_SUCCESS);
    assert_int_equal(m.GpuInstanceDestroy(again), NVML_SUCCESS);
    assert_int_equal(SYM(&m, nvmlDeviceSetMigMode)(d, NVML_DEVICE_MIG_DISABLE, &activation),
                     NVML_SUCCESS);
    assert_int_equal(activation, NVML_SUCCESS); /* Hopper: at once */
    unsigned cur, pend;
    assert_int_equal(m.DeviceGetMigMode(d, &cur, &pend), NVML_SUCCESS);
    assert_int_equal(cur, NVML_DEVICE_MIG_DISABLE);
    assert_int_equal(pend, NVML_DEVICE_MIG_DISABLE);
    nvml_close(&m);
    testutil_sim_start(&nv, "dgx-h100");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refcount),       cmocka_unit_test(test_misuse_codes),
        cmocka_unit_test(test_identity),       cmocka_unit_test(test_live_values),
        cmocka_unit_test(test_events_and_faults), cmocka_unit_test(test_control_errors),
        cmocka_unit_test(test_topology),        cmocka_unit_test(test_processes),
        cmocka_unit_test(test_instances_keep_their_handles),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
