"""What NVML says of MIG on a GPU with MIG disabled, read-only (never sets
anything): the mode, the most MIG devices, and every GPU instance profile's
info and placements where NVML answers. Writes JSON to argv[1]."""
import json
import sys

import pynvml as N

N.nvmlInit()
out = {"driver": N.nvmlSystemGetDriverVersion(), "gpus": []}
for i in range(N.nvmlDeviceGetCount()):
    h = N.nvmlDeviceGetHandleByIndex(i)
    g = {"index": i, "name": N.nvmlDeviceGetName(h)}
    try:
        g["mig_mode"] = list(N.nvmlDeviceGetMigMode(h))
    except N.NVMLError as e:
        g["mig_mode"] = str(e)
    try:
        g["max_mig_devices"] = N.nvmlDeviceGetMaxMigDeviceCount(h)
    except N.NVMLError as e:
        g["max_mig_devices"] = str(e)
    profiles = []
    for p in range(0, 16):
        row = {"profile": p}
        try:
            info = N.nvmlDeviceGetGpuInstanceProfileInfo(h, p)
            for f, _ in info._fields_:
                v = getattr(info, f)
                row[f] = v.decode() if isinstance(v, bytes) else v
        except Exception as e:  # noqa: BLE001: record what NVML says
            row["error"] = str(e)
        try:
            import ctypes
            count = ctypes.c_uint(0)
            arr = (N.c_nvmlGpuInstancePlacement_t * 16)()
            N.nvmlDeviceGetGpuInstancePossiblePlacements(h, row.get("id", p), arr, ctypes.byref(count))
            row["placements"] = [(arr[k].start, arr[k].size) for k in range(count.value)]
        except Exception as e:  # noqa: BLE001
            row["placements_error"] = str(e)
        profiles.append(row)
    g["gpu_instance_profiles"] = profiles
    out["gpus"].append(g)
N.nvmlShutdown()
json.dump(out, open(sys.argv[1], "w"), indent=1, default=str)
print(json.dumps(out, indent=1, default=str)[:6000])
