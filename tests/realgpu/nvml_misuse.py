"""Calls the same NVML functions, with the same misuse, on two libraries
(the real libnvidia-ml.so.1 and gpulet's simulator) in separate processes,
and compares the return codes and error strings.

usage: nvml_misuse.py REAL_LIB SIM_LIB"""
import json
import subprocess
import sys

PROBE = r'''
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
lib.nvmlErrorString.restype = ctypes.c_char_p
r = {}
u = ctypes.c_uint()
r["count before init"] = lib.nvmlDeviceGetCount_v2(ctypes.byref(u))
r["shutdown before init"] = lib.nvmlShutdown()
r["init"] = lib.nvmlInit_v2()
r["init again"] = lib.nvmlInit_v2()
r["shutdown once of two"] = lib.nvmlShutdown()
r["count after one shutdown"] = lib.nvmlDeviceGetCount_v2(ctypes.byref(u))
r["count NULL"] = lib.nvmlDeviceGetCount_v2(None)
h = ctypes.c_void_p()
r["handle index out of range"] = lib.nvmlDeviceGetHandleByIndex_v2(1000, ctypes.byref(h))
r["handle by unknown uuid"] = lib.nvmlDeviceGetHandleByUUID(b"GPU-00000000-0000-0000-0000-000000000000", ctypes.byref(h))
r["handle index 0"] = lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
small = ctypes.create_string_buffer(4)
r["uuid into 4 bytes"] = lib.nvmlDeviceGetUUID(h, small, 4)
r["name into 4 bytes"] = lib.nvmlDeviceGetName(h, small, 4)
r["driver version into 4 bytes"] = lib.nvmlSystemGetDriverVersion(small, 4)
r["uuid NULL buffer"] = lib.nvmlDeviceGetUUID(h, None, 96)
class Mem(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong), ("reserved", ctypes.c_ulonglong),
                ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
m = Mem(version=1)
r["memory v2 wrong version"] = lib.nvmlDeviceGetMemoryInfo_v2(h, ctypes.byref(m))
m = Mem(version=ctypes.sizeof(Mem) | (2 << 24))
r["memory v2"] = lib.nvmlDeviceGetMemoryInfo_v2(h, ctypes.byref(m))
r["memory v2 adds up"] = int(m.used + m.free + m.reserved == m.total)
r["temperature bad sensor"] = lib.nvmlDeviceGetTemperature(h, 7, ctypes.byref(u))
r["clock bad type"] = lib.nvmlDeviceGetClockInfo(h, 99, ctypes.byref(u))
r["ecc bad counter type"] = lib.nvmlDeviceGetTotalEccErrors(h, 1, 5, ctypes.byref(ctypes.c_ulonglong()))
s = ctypes.c_void_p()
r["event set create"] = lib.nvmlEventSetCreate(ctypes.byref(s))
r["register xid+dbe"] = lib.nvmlDeviceRegisterEvents(h, ctypes.c_ulonglong(0x8 | 0x2), s)
class Ev(ctypes.Structure):
    _fields_ = [("device", ctypes.c_void_p), ("type", ctypes.c_ulonglong), ("data", ctypes.c_ulonglong),
                ("gi", ctypes.c_uint), ("ci", ctypes.c_uint)]
r["event wait 10ms"] = lib.nvmlEventSetWait_v2(s, ctypes.byref(Ev()), 10)
r["event wait NULL data"] = lib.nvmlEventSetWait_v2(s, None, 10)
r["event set free"] = lib.nvmlEventSetFree(s)
r["shutdown"] = lib.nvmlShutdown()
r["count after shutdown"] = lib.nvmlDeviceGetCount_v2(ctypes.byref(u))
r["strings"] = {str(c): lib.nvmlErrorString(c).decode() for c in list(range(0, 31)) + [999, 1000]}
print(json.dumps(r))
'''


def probe(lib):
    p = subprocess.run([sys.executable, "-c", PROBE, lib], capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"probe of {lib} failed: {p.stderr}")
    return json.loads(p.stdout)


def main():
    real, sim = probe(sys.argv[1]), probe(sys.argv[2])
    bad = 0
    print(f"{'call':<32} {'real':>6} {'sim':>6} verdict")
    for key in real:
        if key == "strings":
            continue
        ok = real[key] == sim[key]
        bad += not ok
        print(f"{key:<32} {real[key]:>6} {sim[key]:>6} {'same' if ok else 'DIFFER'}")
    for code, text in real["strings"].items():
        if sim["strings"][code] != text:
            bad += 1
            print(f"nvmlErrorString({code}): real {text!r} sim {sim['strings'][code]!r} DIFFER")
    print(json.dumps(real["strings"]))
    print("same codes and strings" if not bad else f"{bad} difference(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
