"""Times each NVML call of gpulet's inventory read, first call and repeat,
to show where start-up time goes on a real GPU. usage: nvml_timing.py [LIB]"""
import ctypes
import sys
import time

lib = ctypes.CDLL(sys.argv[1] if len(sys.argv) > 1 else "libnvidia-ml.so.1")


def timed(name, fn, *args):
    t0 = time.perf_counter()
    rc = fn(*args)
    first = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    fn(*args)
    again = (time.perf_counter() - t0) * 1e3
    print(f"{name:<36} rc={rc:<3} first {first:8.3f} ms   again {again:8.3f} ms")


t0 = time.perf_counter()
rc = lib.nvmlInit_v2()
print(f"{'nvmlInit_v2':<36} rc={rc:<3} first {(time.perf_counter() - t0) * 1e3:8.3f} ms")
count = ctypes.c_uint()
timed("nvmlDeviceGetCount_v2", lib.nvmlDeviceGetCount_v2, ctypes.byref(count))
h = ctypes.c_void_p()
timed("nvmlDeviceGetHandleByIndex_v2", lib.nvmlDeviceGetHandleByIndex_v2, 0, ctypes.byref(h))
buf = ctypes.create_string_buffer(96)
timed("nvmlDeviceGetUUID", lib.nvmlDeviceGetUUID, h, buf, 96)
timed("nvmlDeviceGetName", lib.nvmlDeviceGetName, h, buf, 96)
timed("nvmlDeviceGetMinorNumber", lib.nvmlDeviceGetMinorNumber, h, ctypes.byref(count))
pci = ctypes.create_string_buffer(68)
timed("nvmlDeviceGetPciInfo_v3", lib.nvmlDeviceGetPciInfo_v3, h, pci)
mem = (ctypes.c_ulonglong * 5)()
mem[0] = 40 | (2 << 24)
timed("nvmlDeviceGetMemoryInfo_v2", lib.nvmlDeviceGetMemoryInfo_v2, h, mem)
nodes = (ctypes.c_ulong * 4)()
timed("nvmlDeviceGetMemoryAffinity", lib.nvmlDeviceGetMemoryAffinity, h, 4, nodes, 0)
a, b = ctypes.c_int(), ctypes.c_int()
timed("nvmlDeviceGetCudaComputeCapability", lib.nvmlDeviceGetCudaComputeCapability, h, ctypes.byref(a), ctypes.byref(b))
timed("nvmlDeviceGetArchitecture", lib.nvmlDeviceGetArchitecture, h, ctypes.byref(count))
timed("nvmlDeviceGetMigMode", lib.nvmlDeviceGetMigMode, h, ctypes.byref(count), ctypes.byref(a))
timed("nvmlDeviceGetNvLinkState(0)", lib.nvmlDeviceGetNvLinkState, h, 0, ctypes.byref(count))
t0 = time.perf_counter()
rc = lib.nvmlShutdown()
print(f"{'nvmlShutdown':<36} rc={rc:<3} first {(time.perf_counter() - t0) * 1e3:8.3f} ms")
