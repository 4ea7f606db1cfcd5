/* GPU models the simulator knows. Names, memory sizes and PCI ids are what
 * nvidia-smi shows for each part; clocks and power are the datasheet's. */
#include "scenario.h"

#include <string.h>

static const struct sim_product h100_sxm = {
    .key = "h100-sxm", .name = "NVIDIA H100 80GB HBM3", .arch = NVML_DEVICE_ARCH_HOPPER,
    .cc_major = 9, .cc_minor = 0, .pci_device_id = 0x233010DE, .pci_subsystem_id = 0x16C110DE,
    .memory_mib = 81559, .reserved_mib = 530, .nvlinks = 18, .power_idle_w = 70,
    .power_max_w = 700, .sm_clock_idle = 345, .sm_clock_max = 1980, .mem_clock = 2619,
    .mig_capable = true, .mig = sim_mig_h100_80gb,
};

static const struct sim_product h100_pcie = {
    .key = "h100-pcie", .name = "NVIDIA H100 PCIe", .arch = NVML_DEVICE_ARCH_HOPPER,
    .cc_major = 9, .cc_minor = 0, .pci_device_id = 0x233110DE, .pci_subsystem_id = 0x162610DE,
    .memory_mib = 81559, .reserved_mib = 530, .nvlinks = 0, .power_idle_w = 50,
    .power_max_w = 350, .sm_clock_idle = 345, .sm_clock_max = 1755, .mem_clock = 1593,
    .mig_capable = true, .mig = sim_mig_h100_80gb,
};

static const struct sim_product h200 = {
    .key = "h200", .name = "NVIDIA H200", .arch = NVML_DEVICE_ARCH_HOPPER, .cc_major = 9,
    .cc_minor = 0, .pci_device_id = 0x233510DE, .pci_subsystem_id = 0x18BF10DE,
    .memory_mib = 143771, .reserved_mib = 616, .nvlinks = 18, .power_idle_w = 75,
    .power_max_w = 700, .sm_clock_idle = 345, .sm_clock_max = 1980, .mem_clock = 3201,
    .mig_capable = true, .mig = sim_mig_h200,
};

/* Grace Hopper: the GPU of a GH200 superchip, joined to its Grace CPU by
 * NVLink-C2C (nvidia-smi: "GPU C2C Mode: Enabled", addressing mode ATS). */
static const struct sim_product gh200 = {
    .key = "gh200", .name = "NVIDIA GH200 480GB", .arch = NVML_DEVICE_ARCH_HOPPER,
    .cc_major = 9, .cc_minor = 0, .pci_device_id = 0x234210DE, .pci_subsystem_id = 0x180910DE,
    .memory_mib = 97871, .reserved_mib = 1103, .nvlinks = 18, .power_idle_w = 88,
    .power_max_w = 700, .sm_clock_idle = 345, .sm_clock_max = 1980, .mem_clock = 2619,
    .mig_capable = true, .mig = sim_mig_gh200, .c2c = true,
};

static const struct sim_product a100_80gb = {
    .key = "a100-80gb", .name = "NVIDIA A100-SXM4-80GB", .arch = NVML_DEVICE_ARCH_AMPERE,
    .cc_major = 8, .cc_minor = 0, .pci_device_id = 0x20B210DE, .pci_subsystem_id = 0x147F10DE,
    .memory_mib = 81920, .reserved_mib = 480, .nvlinks = 12, .power_idle_w = 60,
    .power_max_w = 400, .sm_clock_idle = 210, .sm_clock_max = 1410, .mem_clock = 1593,
    .mig_capable = true, .mig = sim_mig_a100_80gb,
};

static const struct sim_product a100_40gb = {
    .key = "a100-40gb", .name = "NVIDIA A100-SXM4-40GB", .arch = NVML_DEVICE_ARCH_AMPERE,
    .cc_major = 8, .cc_minor = 0, .pci_device_id = 0x20B010DE, .pci_subsystem_id = 0x134F10DE,
    .memory_mib = 40536, .reserved_mib = 420, .nvlinks = 12, .power_idle_w = 55,
    .power_max_w = 400, .sm_clock_idle = 210, .sm_clock_max = 1410, .mem_clock = 1215,
    .mig_capable = true, .mig = sim_mig_a100_40gb,
};

static const struct sim_product l4 = {
    .key = "l4", .name = "NVIDIA L4", .arch = NVML_DEVICE_ARCH_ADA, .cc_major = 8,
    .cc_minor = 9, .pci_device_id = 0x27B810DE, .pci_subsystem_id = 0x16CA10DE,
    .memory_mib = 23034, .reserved_mib = 260, .nvlinks = 0, .power_idle_w = 16,
    .power_max_w = 72, .sm_clock_idle = 210, .sm_clock_max = 2040, .mem_clock = 6251,
    .mig_capable = false,
};

static const struct sim_product t4 = {
    .key = "t4", .name = "Tesla T4", .arch = NVML_DEVICE_ARCH_TURING, .cc_major = 7,
    .cc_minor = 5, .pci_device_id = 0x1EB810DE, .pci_subsystem_id = 0x12A210DE,
    .memory_mib = 15360, .reserved_mib = 255, .nvlinks = 0, .power_idle_w = 10,
    .power_max_w = 70, .sm_clock_idle = 300, .sm_clock_max = 1590, .mem_clock = 5000,
    .mig_capable = false,
};

const struct sim_product *const sim_products[] = {&h100_sxm, &h100_pcie, &h200, &gh200, &a100_80gb,
                                                    &a100_40gb, &l4, &t4, NULL};

const struct sim_product *sim_product_find(const char *key)
{
    for (size_t i = 0; sim_products[i]; i++)
        if (!strcmp(sim_products[i]->key, key))
            return sim_products[i];
    return NULL;
}
