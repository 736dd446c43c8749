#!/usr/bin/env python3
"""Distils what the driver, CUDA and NCCL said on a probed host into
said.txt, the lines tests/corpus.rs compares the check's verdict with.
Usage: said.py LOG NCCL_LOG NCCL_TOPO_XML > said.txt (probe.sh runs it)."""
import re, sys

log = open(sys.argv[1]).read()
nccl = open(sys.argv[2]).read()
topo = open(sys.argv[3]).read()
out = []
section = None
for line in log.splitlines():
    if line.startswith("== "):
        section = line[3:]
    m = re.match(r"\s+(BAR1|FB) Memory Usage", line)
    if m:
        section = m.group(1)
    m = re.match(r"\s+Total\s+:\s+(\d+) MiB", line)
    if m and section in ("BAR1", "FB"):
        out.append(f"nvidia-smi -q: {section} Memory Usage Total: {m.group(1)} MiB")
        section = None
    m = re.match(r"\d+ (\S+) (GPU_DIRECT_RDMA_SUPPORTED|DMA_BUF_SUPPORTED) rc 0 value (\d+)", line)
    if m:
        out.append(f"cuDeviceGetAttribute {m.group(1)} CU_DEVICE_ATTRIBUTE_{m.group(2)} {m.group(3)}")
    m = re.match(r"(check --prometheus|check --health|nvidia-smi topo -m): median ([\d.]+)", line)
    if m:
        out.append(f"timing ms median of 30 runs: {m.group(1)}: {m.group(2)}")
version = re.search(r"NCCL version (\S+)", nccl)
v = version.group(1) if version else "?"
seen = set()
for line in nccl.splitlines():
    m = re.search(r"NCCL INFO (NET/IB : No device found\.|NET/Socket : GPU Direct RDMA Disabled for HCA \d+ '\S+'|Using network \S+|NET/IB : GPU Direct RDMA .*)$", line)
    if m and m.group(1) not in seen:
        seen.add(m.group(1))
        out.append(f"NCCL {v}: {m.group(1)}")
for m in re.finditer(r'<pci busid="([^"]+)"[^>]*>\s*<gpu [^>]*gdr="(\d)"', topo):
    out.append(f"NCCL_TOPO_DUMP_FILE gpu {m.group(1)} gdr={m.group(2)}")
for m in re.finditer(r'<net name="([^"]+)"[^>]*gdr="(\d)"', topo):
    out.append(f"NCCL_TOPO_DUMP_FILE net {m.group(1)} gdr={m.group(2)}")
print("\n".join(dict.fromkeys(out)))
