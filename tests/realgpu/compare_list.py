"""Compares `gpulet list -o json` with nvidia-smi, field by field.

usage: compare_list.py LIST_JSON SMI_CSV TOPO_TXT SMI_Q_TXT
SMI_CSV: nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id,driver_version,
         compute_cap,mig.mode.current,minor_number? --format=csv,noheader,nounits
TOPO_TXT: nvidia-smi topo -m
SMI_Q_TXT: nvidia-smi -q (for the minor numbers)
Prints one row per field and exits 1 on any disagreement."""
import csv
import json
import re
import sys


def smi_rows(path):
    fields = ["index", "uuid", "name", "memory_total_mib", "pci_bus_id", "driver_version",
              "compute_capability", "mig_mode"]
    with open(path) as f:
        return [dict(zip(fields, [c.strip() for c in row])) for row in csv.reader(f) if row]


def topo_numa(path):
    """NUMA Affinity per GPU row of nvidia-smi topo -m (None when N/A)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", open(path).read())
    lines = [l for l in text.splitlines() if l.strip()]
    header = lines[0].split("\t")
    header = [h.strip() for h in header]
    col = header.index("NUMA Affinity") if "NUMA Affinity" in header else None
    out = {}
    for line in lines[1:]:
        cells = [c.strip() for c in line.split("\t")]
        if not re.match(r"^GPU\d+$", cells[0]) or col is None:
            continue
        value = cells[col] if col < len(cells) else "N/A"
        out[int(cells[0][3:])] = None if value == "N/A" else int(value)
    return out


def smi_minors(path):
    """Minor Number of each GPU section of nvidia-smi -q, in order."""
    return [m.group(1) for m in re.finditer(r"^\s*Minor Number\s*:\s*(\S+)", open(path).read(), re.M)]


def main():
    doc = json.load(open(sys.argv[1]))
    smi = smi_rows(sys.argv[2])
    numa = topo_numa(sys.argv[3])
    minors = smi_minors(sys.argv[4])
    bad = 0
    print(f"{'GPU':<4} {'field':<20} {'gpulet':<44} {'nvidia-smi':<44} verdict")
    assert doc["count"] == len(smi), (doc["count"], len(smi))
    for g, s in zip(doc["gpus"], smi):
        mig = {"Disabled": "disabled", "Enabled": "enabled", "[N/A]": None, "N/A": None}
        pairs = [
            ("index", str(g["index"]), s["index"]),
            ("minor (/dev/nvidiaN)", str(g["minor"]), minors[g["index"]]),
            ("uuid", g["uuid"], s["uuid"]),
            ("name", g["name"], s["name"]),
            ("memory.total MiB", str(g["memory_total_mib"]), s["memory_total_mib"]),
            ("pci.bus_id", g["pci_bus_id"], s["pci_bus_id"]),
            ("driver_version", doc["driver_version"], s["driver_version"]),
            ("compute_cap", g["compute_capability"], s["compute_capability"]),
            ("mig.mode.current", g["mig_mode"], mig.get(s["mig_mode"], s["mig_mode"])),
            ("NUMA affinity", g["numa_node"], numa.get(g["index"])),
        ]
        for field, ours, theirs in pairs:
            ok = ours == theirs
            bad += not ok
            print(f"{g['index']:<4} {field:<20} {str(ours):<44} {str(theirs):<44} "
                  f"{'agree' if ok else 'DIFFER'}")
    print("all fields agree" if not bad else f"{bad} field(s) differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
