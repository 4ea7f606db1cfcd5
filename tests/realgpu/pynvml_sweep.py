"""A third-party NVML program (NVIDIA's pynvml) run unchanged against the
simulator: it must load it as libnvidia-ml.so.1 and get sane answers."""
import pynvml as N

N.nvmlInit()
print("driver", N.nvmlSystemGetDriverVersion(), "nvml", N.nvmlSystemGetNVMLVersion(),
      "cuda", N.nvmlSystemGetCudaDriverVersion())
calls = {
    "name": N.nvmlDeviceGetName, "uuid": N.nvmlDeviceGetUUID, "serial": N.nvmlDeviceGetSerial,
    "minor": N.nvmlDeviceGetMinorNumber, "pci": lambda h: N.nvmlDeviceGetPciInfo(h).busId,
    "memory": lambda h: N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2).used,
    "util": lambda h: N.nvmlDeviceGetUtilizationRates(h).gpu,
    "temp": lambda h: N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU),
    "power": N.nvmlDeviceGetPowerUsage, "energy": N.nvmlDeviceGetTotalEnergyConsumption,
    "sm clock": lambda h: N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM),
    "cc": N.nvmlDeviceGetCudaComputeCapability, "arch": N.nvmlDeviceGetArchitecture,
    "mig": N.nvmlDeviceGetMigMode, "ecc dbe": lambda h: N.nvmlDeviceGetTotalEccErrors(
        h, N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_VOLATILE_ECC),
    "replays": N.nvmlDeviceGetPcieReplayCounter,
    "nvlink0": lambda h: N.nvmlDeviceGetNvLinkState(h, 0),
    "fan (not modelled)": N.nvmlDeviceGetFanSpeed,
    "procs (not modelled)": N.nvmlDeviceGetComputeRunningProcesses,
}
for i in range(N.nvmlDeviceGetCount()):
    h = N.nvmlDeviceGetHandleByIndex(i)
    out = []
    for name, fn in calls.items():
        try:
            out.append(f"{name}={fn(h)}")
        except N.NVMLError as e:
            out.append(f"{name}=<{e}>")
    print(i, "; ".join(out))
N.nvmlShutdown()
print("pynvml sweep done")
