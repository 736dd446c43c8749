# A read-only probe of a GPU host for the corpus (README.md beside it):
# the check's --dump and its timings beside what the driver, CUDA and
# NCCL say there. It reads sysfs, procfs and tool output and runs one
# NCCL all_reduce as a user would; it loads, unloads and writes nothing
# outside $OUT and /tmp. Run from the repository root with the check's
# static binary at $B and an empty directory $OUT:
#   B=path/to/gpudirect-rdma-check OUT=dir bash readiness/tests/real/probe.sh
B=${B:-.device/gpudirect-rdma-check}
L=$OUT/log.txt
{
echo "== uname"; uname -r; nproc
echo "== nvidia-smi -L"; nvidia-smi -L
echo "== nvidia-smi -q BAR1/FB"; nvidia-smi -q | grep -A3 -E "BAR1 Memory Usage|FB Memory Usage|Persistence Mode" | head -60
echo "== check (human)"; $B --dump $OUT/dump.tar; echo "rc=$?"
echo "== check --health"; $B --health; echo "rc=$?"
echo "== check --next-boot"; $B --next-boot; echo "rc=$?"; $B --kernel $(uname -r); echo "rc=$?"
echo "== params"; grep -i grdma /proc/driver/nvidia/params; ls /sys/module/ | grep -E "ib_|rdma|nvidia"; cat /sys/module/ib_core/taint 2>&1; ls /sys/class/infiniband_verbs/ 2>&1; cat /proc/cmdline
echo "== replay"; $B --from $OUT/dump.tar --json > /tmp/replay.json; echo "rc=$?"; $B --json > /tmp/live.json; cmp /tmp/replay.json /tmp/live.json && echo "replay json identical"
echo "== timing: 30 runs each, ms"
python3 - "$B" <<'PY'
import subprocess, time, sys, statistics
b=sys.argv[1]
def t(cmd, n):
    xs=[]
    for _ in range(n):
        s=time.perf_counter(); subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); xs.append((time.perf_counter()-s)*1000)
    xs.sort(); return "median %.2f min %.2f max %.2f" % (statistics.median(xs), xs[0], xs[-1])
for _ in range(2):
    print("check --prometheus:", t([b,"--prometheus"],30))
    print("check --health:", t([b,"--health"],30))
    print("check (human, asks nvidia-smi):", t([b],10))
    print("nvidia-smi topo -m:", t(["nvidia-smi","topo","-m"],10))
PY
echo "== strace count of the check"; command -v strace >/dev/null && strace -c -f $B --prometheus >/dev/null 2>/tmp/st; tail -25 /tmp/st
echo "== CUDA attributes"
python3 - <<'PY'
import ctypes
c=ctypes.CDLL("libcuda.so.1"); print("cuInit", c.cuInit(0))
n=ctypes.c_int(); c.cuDeviceGetCount(ctypes.byref(n))
for i in range(n.value):
    d=ctypes.c_int(); c.cuDeviceGet(ctypes.byref(d), i)
    for name,a in (("GPU_DIRECT_RDMA_SUPPORTED",116),("DMA_BUF_SUPPORTED",124)):
        v=ctypes.c_int(); r=c.cuDeviceGetAttribute(ctypes.byref(v), a, d)
        bus=ctypes.create_string_buffer(32); c.cuDeviceGetPCIBusId(bus, 32, d)
        print(i, bus.value.decode(), name, "rc", r, "value", v.value)
PY
echo "== NCCL"
cat > /tmp/nccl_probe.py <<'PY'
import os, torch, torch.distributed as dist, torch.multiprocessing as mp
def run(r, n):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29511")
    torch.cuda.set_device(r)
    dist.init_process_group("nccl", rank=r, world_size=n, device_id=torch.device("cuda", r))
    x=torch.ones(1<<20, device="cuda"); dist.all_reduce(x); torch.cuda.synchronize()
    if r==0: print("rank0 all_reduce", x[0].item(), "torch", torch.__version__, "nccl", torch.cuda.nccl.version(), flush=True)
    dist.destroy_process_group()
if __name__ == "__main__":
    n=torch.cuda.device_count()
    mp.spawn(run, args=(n,), nprocs=n)
PY
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH,P2P NCCL_TOPO_DUMP_FILE=$OUT/nccl-topo.xml timeout 300 python3 /tmp/nccl_probe.py > $OUT/nccl.log 2>&1; echo "nccl rc=$?"
grep -E "NCCL version|NET/|GDR|GPU Direct|DMA-BUF|DmaBuf|No device|Using network|rank0|P2P|Error|error" $OUT/nccl.log | sed -E 's/^[^ ]+ //' | sort | uniq -c | head -60
} > $L 2>&1
cp /tmp/live.json $OUT/live.json
python3 readiness/tests/real/said.py $L $OUT/nccl.log $OUT/nccl-topo.xml > $OUT/said.txt
ls -la $OUT
