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
    {"gh200",
     "# A Grace Hopper node (arm64): one GH200 480GB, its GPU joined to the\n"
     "# Grace CPU by NVLink-C2C, no PCIe switch, no NVLink peer.\n"
     "name: gh200\n"
     "driver_version: \"580.159.04\"\n"
     "cuda_version: \"13.0\"\n"
     "gpus_per_pcie_switch: 0\n"
     "gpus:\n"
     "  - {product: gh200, pci_bus_id: \"0009:01:00.0\"}\n"},
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
    {"a100-mig-mixed",
     "# 8 A100 40GB, MIG on all but GPU 7, in the layouts mig-parted's\n"
     "# named configs make: balanced, all 1g, one 7g, and one with media\n"
     "# extensions. For --mig-strategy mixed.\n"
     "name: a100-mig-mixed\n"
     "driver_version: \"580.159.04\"\n"
     "cuda_version: \"13.0\"\n"
     "numa_nodes: 2\n"
     "gpus_per_pcie_switch: 2\n"
     "nvlink: nvswitch\n"
     "gpus:\n"
     "  - {product: a100-40gb, count: 4, mig: true, mig_devices: [3g.20gb, 2g.10gb, 1g.5gb, 1g.5gb]}\n"
     "  - {product: a100-40gb, mig: true, mig_devices: [1g.5gb, 1g.5gb, 1g.5gb, 1g.5gb, 1g.5gb, 1g.5gb, 1g.5gb]}\n"
     "  - {product: a100-40gb, mig: true, mig_devices: [4g.20gb, 1g.5gb+me, 1g.5gb, 1g.5gb]}\n"
     "  - {product: a100-40gb, mig: true, mig_devices: [7g.40gb]}\n"
     "  - {product: a100-40gb}\n"},
    {"h100-mig-single",
     "# A DGX H100 with every GPU in seven 1g.10gb MIG devices: the uniform\n"
     "# layout --mig-strategy single needs (56 nvidia.com/gpu).\n"
     "name: h100-mig-single\n"
     "driver_version: \"580.159.04\"\n"
     "cuda_version: \"13.0\"\n"
     "numa_nodes: 2\n"
     "nvlink: nvswitch\n"
     "gpus:\n"
     "  - product: h100-sxm\n"
     "    count: 8\n"
     "    mig: true\n"
     "    mig_devices: [1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb]\n"},
    {"h100-mig-empty",
     "# A DGX H100 with every GPU in MIG mode and no MIG device yet: for\n"
     "# gpulet's DRA to make them per claim (--dra-mig).\n"
     "name: h100-mig-empty\n"
     "driver_version: \"580.159.04\"\n"
     "cuda_version: \"13.0\"\n"
     "numa_nodes: 2\n"
     "nvlink: nvswitch\n"
     "gpus:\n"
     "  - product: h100-sxm\n"
     "    count: 8\n"
     "    mig: true\n"},
    {"h200-mig-mixed",
     "# 4 H200 (the lent machine's model): two balanced, one in seven 1g,\n"
     "# and one whole. For --mig-strategy mixed beside a non-MIG GPU.\n"
     "name: h200-mig-mixed\n"
     "driver_version: \"580.159.04\"\n"
     "cuda_version: \"13.0\"\n"
     "nvlink: nvswitch\n"
     "gpus:\n"
     "  - {product: h200, count: 2, mig: true, mig_devices: [3g.71gb, 2g.35gb, 1g.18gb, 1g.18gb]}\n"
     "  - {product: h200, mig: true, mig_devices: [1g.18gb, 1g.18gb, 1g.18gb, 1g.18gb, 1g.18gb, 1g.18gb, 1g.18gb]}\n"
     "  - {product: h200}\n"},
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

const char *const sim_preset_names[] = {"dgx-h100", "hgx-h200", "h200x4-vm",  "gh200", "a100-2x4",
                                        "a100-mig-mixed", "h100-mig-single", "h100-mig-empty",
                                        "h200-mig-mixed",
                                        "l4-pcie",
                                        "t4",       "mixed-pcie", "scale-64", NULL};

const char *sim_preset_text(const char *name)
{
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++)
        if (!strcmp(presets[i].name, name))
            return presets[i].yaml;
    return NULL;
}
