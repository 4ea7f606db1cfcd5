/* Built-in scenarios, written in the same YAML a user would write, so that
 * `gpulet sim show NAME` gives a starting point and one parser serves both. */
#include <stddef.h>
#include <string.h>

#include "scenario.h"

struct sim_preset {
    const char *name;
    const char *yaml;
};

static const struct sim_preset presets[] = {
    {"dgx-h100",
     "# DGX H100: 8 H100 SXM, every GPU's 18 NVLinks on the NVSwitch fabric,\n"
     "# GPUs 0-3 on NUMA node 0 and 4-7 on node 1, each behind its own PCIe switch.\n"
     "name: dgx-h100\n"
     "driver_version: \"580.159.04\"\n"
     "cuda_version: \"13.0\"\n"
     "numa_nodes: 2\n"
     "nvlink: nvswitch\n"
     "gpus:\n"
     "  - product: h100-sxm\n"
     "    count: 8\n"},
    {"hgx-h200",
     "# HGX H200: 8 H200 on the NVSwitch fabric, two NUMA nodes.\n"
     "name: hgx-h200\n"
     "driver_version: \"580.159.04\"\n"
     "cuda_version: \"13.0\"\n"
     "numa_nodes: 2\n"
     "nvlink: nvswitch\n"
     "gpus:\n"
     "  - product: h200\n"
     "    count: 8\n"},
    {"h200x4-vm",
     "# 4 H200 of an HGX board passed through to a VM, as measured on the\n"
     "# nvidia-h200-x4 machine (docs/real-gpu.md): NV18 between every pair\n"
     "# through the NVSwitches, all on the host bridge (PHB), one NUMA node.\n"
     "name: h200x4-vm\n"
     "driver_version: \"580.159.04\"\n"
     "cuda_version: \"13.0\"\n"
     "gpus_per_pcie_switch: 0\n"
     "nvlink: nvswitch\n"
     "gpus:\n"
     "  - {product: h200, pci_bus_id: \"0000:00:06.0\"}\n"
     "  - {product: h200, pci_bus_id: \"0000:00:07.0\"}\n"
     "  - {product: h200, pci_bus_id: \"0000:00:08.0\"}\n"
     "  - {product: h200, pci_bus_id: \"0000:00:09.0\"}\n"},
    {"a100-2x4",
     "# 8 A100 80GB in two NVLink islands of four: each GPU has 4 direct links\n"
     "# to each peer of its island and none to the other island.\n"
     "name: a100-2x4\n"
     "driver_version: \"580.159.04\"\n"
     "cuda_version: \"13.0\"\n"
     "numa_nodes: 2\n"
     "gpus_per_pcie_switch: 2\n"
     "nvlink: islands\n"
     "nvlink_islands: [[0, 1, 2, 3], [4, 5, 6, 7]]\n"
     "gpus:\n"
     "  - product: a100-80gb\n"
     "    count: 8\n"},
    {"l4-pcie",
     "# 4 L4 on PCIe only: two per NUMA node, each pair behind one PCIe switch.\n"
     "name: l4-pcie\n"
     "driver_version: \"580.159.04\"\n"
     "cuda_version: \"13.0\"\n"
     "numa_nodes: 2\n"
     "gpus_per_pcie_switch: 2\n"
     "gpus:\n"
     "  - product: l4\n"
     "    count: 4\n"},
    {"t4",
     "# One Tesla T4, as on a small cloud instance.\n"
     "name: t4\n"
     "driver_version: \"580.159.04\"\n"
     "cuda_version: \"13.0\"\n"
     "gpus:\n"
     "  - product: t4\n"},
    {"mixed-pcie",
     "# Two GPU models in one PCIe server: 2 H100 PCIe for training and 4 L4\n"
     "# for inference, two per NUMA node behind each PCIe switch.\n"
     "name: mixed-pcie\n"
     "driver_version: \"580.159.04\"\n"
     "cuda_version: \"13.0\"\n"
     "numa_nodes: 2\n"
     "gpus_per_pcie_switch: 2\n"
     "gpus:\n"
     "  - product: h100-pcie\n"
     "    count: 2\n"
     "  - product: l4\n"
     "    count: 4\n"},
    {"scale-64",
     "# 64 H100 SXM on 8 NUMA nodes, for scale tests (no real node has this many).\n"
     "name: scale-64\n"
     "driver_version: \"580.159.04\"\n"
     "cuda_version: \"13.0\"\n"
     "numa_nodes: 8\n"
     "nvlink: nvswitch\n"
     "gpus:\n"
     "  - product: h100-sxm\n"
     "    count: 64\n"},
};

const char *const sim_preset_names[] = {"dgx-h100", "hgx-h200", "h200x4-vm",  "a100-2x4", "l4-pcie",
                                        "t4",       "mixed-pcie", "scale-64", NULL};

const char *sim_preset_text(const char *name)
{
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++)
        if (!strcmp(presets[i].name, name))
            return presets[i].yaml;
    return NULL;
}
