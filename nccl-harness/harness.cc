// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
// nccl-harness (issue 42): NCCL's own topology and GPUDirect RDMA decision
// code, compiled from NCCL's source in the fixtures (xtask/src/nccl_harness.rs
// builds it; docs/nccl-harness.md says what runs and what is stubbed), run
// over one node described either as NCCL's topology XML (the form NCCL
// itself reads from NCCL_TOPO_FILE and writes to NCCL_TOPO_DUMP_FILE) or as
// a sysfs tree with the node's GPUs and RDMA devices named (--sysfs: the
// tree gpudirect-rdma-check reads). From XML it does the XML half of
// ncclTopoGetSystem() (graph/topo.cc): the cpus' host_hash rewritten as
// NCCL rewrites it. From sysfs it does the other half: each GPU through
// ncclTopoFillGpu's steps, each NIC through ncclTopoProcessNet with a
// stand-in for the net plugin, then ncclTopoTrimXml (below, sysfs()).
// Then the calls init.cc makes: ncclTopoGetSystemFromXml,
// ncclTopoComputePaths with no communicator (which paths.cc supports: it
// skips the transports' checks). Then, for every GPU
// and every NIC, what NCCL decided: the path type and bandwidth,
// ncclTopoCheckGdr for reads and for writes, and the intermediate rank of
// PXN. Nothing of NCCL's is re-implemented here; this file only calls it
// and prints.
#include "core.h"
#include "graph.h"
#include "graph/topo.h"
#include "graph/xml.h"
#include "net.h"
#include "nvmlwrap.h"
#include "param.h"
#include "utils.h"
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <climits>
#include <cstring>
#include <dirent.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

static const char* gdrMode(enum ncclTopoGdrMode m) {
  switch (m) {
  case ncclTopoGdrModeDisable: return "off";
  case ncclTopoGdrModeDefault: return "on";
  case ncclTopoGdrModePci: return "on-pci";
  default: return "?";
  }
}

// What NCCL decided for every GPU and NIC of @xml (the system built from it).
// Defined in graph/xml.cc, declared in no header of NCCL's.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 30, 0)
#include "os.h"
// os/linux.cc from 2.30: the same reader, its buffer's size given.
static ncclResult_t ncclTopoGetStrFromSys(const char* path, const char* fileName, char* strValue) {
  return ncclOsTopoGetStrFromSys(path, fileName, strValue, MAX_STR_LEN);
}
#else
ncclResult_t ncclTopoGetStrFromSys(const char* path, const char* fileName, char* strValue);
#endif
ncclResult_t ncclTopoGetPciNode(struct ncclXml* xml, const char* busId, struct ncclXmlNode** pciNode);
ncclResult_t ncclTopoGetXmlFromSys(struct ncclXmlNode* pciNode, struct ncclXml* xml);
ncclResult_t ncclTopoGetXmlFromGpu(struct ncclXmlNode* pciNode, nvmlDevice_t nvmlDev, struct ncclXml* xml,
                                   struct ncclXmlNode** gpuNodeRet);

static ncclResult_t report(struct ncclTopoSystem* system, struct ncclXml* xml);

static ncclResult_t decide(struct ncclXml* xml) {
  struct ncclTopoSystem* system;
  NCCLCHECK(ncclTopoGetSystemFromXml(xml, &system, getHostHash()));
  return report(system, xml);
}

// --levels L,...: the same node judged at each NCCL_NET_GDR_LEVEL in one run
// (issue 57: a process per node and level would cost hours over generated
// nodes). NCCL reads the level once and keeps it (NCCL_PARAM), and only
// paths.cc reads it (ncclTopoComputePaths, ncclTopoCheckGdr); so the system
// is built once from the XML here, and each level is a child process that
// sets it and computes the paths and decisions, its block headed
// `level L` (`default`: as the environment and NCCL's files set it).
// `distances`: --distances's answer from the same system, every GPU and
// net marked as able to
// register GPU memory (their gdrSupport, which is all NCCL takes from the
// XML's `gdr` attributes: topo.cc, ncclTopoAddNet and ncclTopoAddGpu) at
// NCCL_NET_GDR_LEVEL=SYS.
static std::vector<std::string> levels;
static ncclResult_t decide_levels(struct ncclXml* xml) {
  if (levels.empty()) return decide(xml);
  struct ncclTopoSystem* system;
  NCCLCHECK(ncclTopoGetSystemFromXml(xml, &system, getHostHash()));
  for (const std::string& level : levels) {
    printf("level %s\n", level.c_str());
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) return ncclSystemError;
    if (child == 0) {
      // `default`: the environment as given, where NCCL's configuration
      // files may set the level (NCCL puts their settings in the
      // environment where it has none: misc/param.cc, setEnvFile).
      if (level == "default") {
      } else if (level == "distances") {
        setenv("NCCL_NET_GDR_LEVEL", "SYS", 1);
        for (int g = 0; g < system->nodes[GPU].count; g++) system->nodes[GPU].nodes[g].gpu.gdrSupport = 1;
        for (int n = 0; n < system->nodes[NET].count; n++) system->nodes[NET].nodes[n].net.gdrSupport = 1;
      } else {
        setenv("NCCL_NET_GDR_LEVEL", level.c_str(), 1);
      }
      ncclResult_t r = report(system, xml);
      fflush(stdout);
      _exit(r == ncclSuccess ? 0 : 1);
    }
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "nccl-harness: NCCL's code failed at NCCL_NET_GDR_LEVEL=%s\n", level.c_str());
      return ncclInternalError;
    }
  }
  return ncclSuccess;
}

static ncclResult_t report(struct ncclTopoSystem* system, struct ncclXml* xml) {
  NCCLCHECK(ncclTopoComputePaths(system, NULL));
  printf("nccl %d gpus %d nets %d\n", NCCL_VERSION_CODE, system->nodes[GPU].count, system->nodes[NET].count);
  for (int g = 0; g < system->nodes[GPU].count; g++) {
    struct ncclTopoNode* gpu = system->nodes[GPU].nodes + g;
    char gpuBus[32];  // int64ToBusId writes 12 characters and a NUL
    NCCLCHECK(int64ToBusId(gpu->id, gpuBus));
    for (int n = 0; n < system->nodes[NET].count; n++) {
      struct ncclTopoNode* net = system->nodes[NET].nodes + n;
      struct ncclTopoLinkList* path = gpu->paths[NET] + n;
      enum ncclTopoGdrMode read, write;
      int proxy;
      NCCLCHECK(ncclTopoCheckGdr(system, gpu->gpu.rank, net->id, 1, &read));
      NCCLCHECK(ncclTopoCheckGdr(system, gpu->gpu.rank, net->id, 0, &write));
      NCCLCHECK(ncclTopoGetIntermediateRank(system, gpu->gpu.rank, net->id, &proxy));
      // The net's name: the XML's net of that plugin device number.
      char dev[16];
      snprintf(dev, sizeof(dev), "%d", net->net.dev);
      struct ncclXmlNode* xmlNet;
      const char* name = nullptr;
      NCCLCHECK(xmlFindTagKv(xml, "net", &xmlNet, "dev", dev));
      if (xmlNet != nullptr) NCCLCHECK(xmlGetAttr(xmlNet, "name", &name));
      printf("gpu %s rank %d net %d name %s path %s bw %g hops %d gdr_read %s gdr_write %s proxy_rank %d\n",
             gpuBus, gpu->gpu.rank, net->net.dev, name ? name : "?", topoPathTypeStr[path->type], path->bw,
             path->count, gdrMode(read), gdrMode(write), proxy);
    }
    // The NIC NCCL gives this GPU's rank on channel 0 (topo.cc,
    // ncclTopoGetLocalNet: the nearest NICs by bandwidth then path type,
    // one picked by the GPU's device number), named as above.
    int64_t localId;
    int localDev;
    if (system->nodes[NET].count > 0 &&
        ncclTopoGetLocalNet(system, gpu->gpu.rank, 0, &localId, &localDev) == ncclSuccess) {
      char dev[16];
      snprintf(dev, sizeof(dev), "%d", localDev);
      struct ncclXmlNode* xmlNet;
      const char* name = nullptr;
      NCCLCHECK(xmlFindTagKv(xml, "net", &xmlNet, "dev", dev));
      if (xmlNet != nullptr) NCCLCHECK(xmlGetAttr(xmlNet, "name", &name));
      printf("local gpu %s rank %d name %s\n", gpuBus, gpu->gpu.rank, name ? name : "?");
    }
  }
  return ncclSuccess;
}

static ncclResult_t from_file(const char* file) {
  struct ncclXml* xml;
  NCCLCHECK(xmlAlloc(&xml, NCCL_TOPO_XML_MAX_NODES));
  NCCLCHECK(ncclTopoGetXmlFromFile(file, xml, 1));
  if (xml->maxIndex == 0) {
    fprintf(stderr, "nccl-harness: %s holds no topology\n", file);
    return ncclInvalidArgument;
  }
  // As ncclTopoGetSystem does with a file's cpus (graph/topo.cc).
  struct ncclXmlNode* node;
  NCCLCHECK(xmlFindTag(xml, "cpu", &node));
  while (node != nullptr) {
    NCCLCHECK(xmlSetAttrLong(node, "host_hash", getHostHash()));
    NCCLCHECK(xmlFindNextTag(xml, "cpu", node, &node));
  }
  return decide(xml);
}

// The node as --sysfs describes it: its GPUs and its RDMA devices.
struct Gpu {
  const char* busId;
  int sm = 90;
  int gdr = 1;
  // NVLinks to NVSwitches (NVML's answer on an HGX board; 18 on H100).
  int nvswitch = 0;
  // Active C2C links to the GPU's CPU (NVML's NVML_FI_DEV_C2C_LINK_COUNT
  // and _GET_STATUS on Grace Hopper: 10 on a GH200).
  int c2c = 0;
};
struct Net {
  const char* name;
  int gdr = 1;
};
static std::vector<Gpu> gpus;
static std::vector<Net> nets;
// NVLinks between two GPUs (NVML's answer on a board with NVLink bridges or
// a mesh without NVSwitches): each GPU's links to the other.
struct NvPair {
  std::string a, b;
  int count;
};
static std::vector<NvPair> nvPairs;
static std::vector<std::string> netPaths;

// The net plugin (net_ib.cc's ncclIbGetProperties) as the harness stands
// for it: the devices named, in the order given; each one's pciPath is
// where /sys/class/infiniband/<name>/device leads (net_ib.cc's
// ncclIbGetPciPath, without its merging of ports and VFs onto function 0);
// ptrSupport has NCCL_PTR_CUDA where the description says GPU memory can
// be registered (net_ib.cc: ncclIbGdrSupport, nv_peer_mem's or
// nvidia_peermem's file). The rest are the values net_ib.cc gives a
// ConnectX-7 port; they change no GPU x NIC decision.
static ncclResult_t netDevCount(int, int* physical, int* virt) {
  *physical = (int)nets.size();
  *virt = 0;
  return ncclSuccess;
}
static ncclResult_t netSetVirtDevCount(int, int) { return ncclSuccess; }
static ncclResult_t netDevices(int* n) {
  *n = (int)nets.size();
  return ncclSuccess;
}
// The node's DMA-BUF support (--dmabuf): the CUDA driver's
// CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED and the kernel's
// ibv_reg_dmabuf_mr, which NCCL probes on a GPU and a NIC (init.cc
// dmaBufSupported; net_ib.cc ncclIbDmaBufSupport): given, as the check
// found them. NCCL_DMABUF_ENABLE is NCCL's own parameter (init.cc).
static bool dmabuf = false;
// --distances: every NIC the IB plugin's rule finds registers GPU memory,
// so that no pair's route is diverted through the CPU (paths.cc does that
// where GPUDirect RDMA is off) and each path is the distance NCCL computed.
static bool everyNicGdr = false;
NCCL_PARAM(DmaBufEnable, "DMABUF_ENABLE", 1);

static ncclResult_t netProperties(int dev, ncclNetProperties_t* props) {
  memset(props, 0, sizeof(*props));
  props->name = (char*)nets[dev].name;
  props->pciPath = netPaths[dev].empty() ? nullptr : (char*)netPaths[dev].c_str();
  props->guid = 0x1000 + dev;
  // A device --net names says itself (gdr=).
  bool cuda = everyNicGdr || nets[dev].gdr != 0;
  props->ptrSupport = NCCL_PTR_HOST | (cuda ? NCCL_PTR_CUDA : 0) | (dmabuf ? NCCL_PTR_DMABUF : 0);
  props->speed = 400000;
  props->port = 1;
  props->latency = 0;
  props->maxComms = 65536;
  props->maxRecvs = 1;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 30, 0)
  props->railId = NCCL_NET_ID_UNDEF;
  props->planeId = NCCL_NET_ID_UNDEF;
#endif
  return ncclSuccess;
}

// Without --net, NCCL's own IB plugin (net_ib.cc; 2.30.7 net_ib/), as
// plugin/net.cc's ncclNetPluginInit runs it: init (ncclIbInitDevices:
// each device's ACTIVE ports with an InfiniBand or Ethernet link layer
// that NCCL_IB_HCA admits, a device per port, ports and VFs merged onto
// function 0 in the PCI path, mlx5's Data Direct function where the
// kernel names one), then the device count; a plugin without devices is
// disabled and NCCL uses sockets, which register no GPU memory: no net
// here. libibverbs and libmlx5 are the verbs double (verbs_double.cc),
// which reads the node's tree. The devices, their properties and virtual
// NICs (makeVDevice) are the plugin's; --distances only adds GPU memory
// to what each registers.
static bool ibPlugin = false;
static int ibPhysical = 0, ibVirtual = NCCL_UNDEF_DEV_COUNT;
static ncclResult_t ibDevCount(int, int* physical, int* virt) {
  *physical = ibPhysical;
  *virt = ibVirtual;
  return ncclSuccess;
}
static ncclResult_t ibSetVirtDevCount(int, int n) {
  ibVirtual = n;
  return ncclSuccess;
}
static ncclResult_t ibProperties(int dev, ncclNetProperties_t* props) {
  NCCLCHECK(ncclNetIb.getProperties(dev, props));
  if (everyNicGdr) props->ptrSupport |= NCCL_PTR_CUDA;
  return ncclSuccess;
}
static ncclResult_t ib_plugin() {
  void* context = nullptr;
  ncclNetCommConfig_t config = {};
  config.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF;
  if (ncclNetIb.init(&context, 0, &config, ncclDebugLog, nullptr) != ncclSuccess) return ncclSuccess;
  int n = 0;
  if (ncclNetIb.devices(&n) != ncclSuccess || n <= 0) return ncclSuccess;
  ibPhysical = n;
  ibPlugin = true;
  return ncclSuccess;
}

// The cpu nodes in the order NCCL's own XML has them, which orders its
// NET nodes and so the device numbers ncclTopoGetLocalNet picks among
// (issue 57). NCCL adds a cpu where a device's path first reaches a root
// complex (graph/xml.cc, ncclTopoGetXmlFromSys): each rank fills its own
// GPU, then the nets in its plugin's order (topo.cc, ncclTopoGetSystem,
// ncclTopoProcessNet), and the node's XML is local rank 0's with the
// others' fused after it (ncclTopoFuseXml appends what is new). The cpus
// made above for every NUMA id come in that order: rank 0's GPU's, then
// each net's by plugin device number, then the rest as they were (no net
// hangs from those). A topology file's cpus come before all of them: each
// rank reads the file before it fills its GPU and nets (topo.cc,
// ncclTopoGetSystem), so rank 0's XML starts with the file's cpus that
// keep something after ncclTopoTrimXml (its GPU or a net), in the file's
// order.
static std::vector<struct ncclXmlNode*> fileCpus;
static ncclResult_t order_cpus(struct ncclXml* xml) {
  struct ncclXmlNode* top;
  NCCLCHECK(xmlFindTag(xml, "system", &top));
  std::vector<struct ncclXmlNode*> order;
  auto cpu_of = [](struct ncclXmlNode* n) {
    while (n != nullptr && strcmp(n->name, "cpu") != 0) n = n->parent;
    return n;
  };
  auto add = [&](struct ncclXmlNode* n) {
    n = cpu_of(n);
    if (n != nullptr && std::find(order.begin(), order.end(), n) == order.end()) order.push_back(n);
  };
  std::vector<struct ncclXmlNode*> kept;
  if (!gpus.empty()) {
    struct ncclXmlNode* pci;
    NCCLCHECK(ncclTopoGetPciNode(xml, gpus[0].busId, &pci));
    kept.push_back(cpu_of(pci));
  }
  struct ncclXmlNode* net;
  NCCLCHECK(xmlFindTag(xml, "net", &net));
  while (net != nullptr) {
    kept.push_back(cpu_of(net));
    NCCLCHECK(xmlFindNextTag(xml, "net", net, &net));
  }
  for (struct ncclXmlNode* c : fileCpus) {
    if (std::find(kept.begin(), kept.end(), c) != kept.end()) add(c);
  }
  if (!gpus.empty()) {
    struct ncclXmlNode* pci;
    NCCLCHECK(ncclTopoGetPciNode(xml, gpus[0].busId, &pci));
    add(pci);
  }
  for (int dev = 0; dev < MAX_SUBS; dev++) {
    char value[16];
    snprintf(value, sizeof(value), "%d", dev);
    struct ncclXmlNode* net;
    NCCLCHECK(xmlFindTagKv(xml, "net", &net, "dev", value));
    add(net);
  }
  for (int s = 0; s < top->nSubs; s++) {
    if (std::find(order.begin(), order.end(), top->subs[s]) == order.end()) order.push_back(top->subs[s]);
  }
  for (size_t s = 0; s < order.size() && s < (size_t)top->nSubs; s++) top->subs[s] = order[s];
  return ncclSuccess;
}

static const char* cpuVendor = "GenuineIntel";
static int cpuFamily = 6, cpuModel = 207;

static ncclResult_t from_sysfs(const char* dump) {
  struct ncclXml* xml;
  NCCLCHECK(xmlAlloc(&xml, NCCL_TOPO_XML_MAX_NODES));
  // As ncclTopoGetSystem (graph/topo.cc) starts: the site's topology file
  // first (NCCL_TOPO_FILE, else the one nvidia-topologyd writes, which
  // node_files.cc serves from the node's tree), each cpu's host_hash
  // rewritten; what the file places, sysfs does not move.
  const char* topoFile = ncclGetEnv("NCCL_TOPO_FILE");
  if (topoFile) {
    NCCLCHECK(ncclTopoGetXmlFromFile(topoFile, xml, 1));
  } else {
    NCCLCHECK(ncclTopoGetXmlFromFile("/var/run/nvidia-topologyd/virtualTopology.xml", xml, 0));
  }
  struct ncclXmlNode* fileCpu;
  NCCLCHECK(xmlFindTag(xml, "cpu", &fileCpu));
  while (fileCpu != nullptr) {
    fileCpus.push_back(fileCpu);
    NCCLCHECK(xmlSetAttrLong(fileCpu, "host_hash", getHostHash()));
    NCCLCHECK(xmlFindNextTag(xml, "cpu", fileCpu, &fileCpu));
  }
  struct ncclXmlNode* top;
  if (xml->maxIndex == 0) {
    NCCLCHECK(xmlAddNode(xml, NULL, "system", &top));
    NCCLCHECK(xmlSetAttrInt(top, "version", NCCL_TOPO_XML_VERSION));
  } else {
    NCCLCHECK(xmlFindTag(xml, "system", &top));
  }
  // The CPUs NCCL would describe from cpuid (xml.cc, ncclTopoGetXmlFromCpu)
  // are the node's, not the build host's: one per NUMA id a root port may
  // name (-1 to 7), the description's vendor and model; NCCL's trim below
  // removes those no device reaches.
  for (int numa = -1; numa < 8; numa++) {
    struct ncclXmlNode* cpu;
    NCCLCHECK(xmlAddNode(xml, top, "cpu", &cpu));
    NCCLCHECK(xmlSetAttrLong(cpu, "host_hash", getHostHash()));
    NCCLCHECK(xmlSetAttrInt(cpu, "numaid", numa));
    // An arm64 build of NCCL sets the arch alone (no cpuid).
    if (strcmp(cpuVendor, "arm64") == 0) {
      NCCLCHECK(xmlSetAttr(cpu, "arch", "arm64"));
      continue;
    }
    NCCLCHECK(xmlSetAttr(cpu, "arch", "x86_64"));
    NCCLCHECK(xmlSetAttr(cpu, "vendor", cpuVendor));
    NCCLCHECK(xmlSetAttrInt(cpu, "familyid", cpuFamily));
    NCCLCHECK(xmlSetAttrInt(cpu, "modelid", cpuModel));
  }
  // Each GPU as ncclTopoFillGpu (xml.cc) places it, its rank's as
  // ncclTopoGetSystem marks it; with no NVML handle, the path NCCL takes
  // when it has none: the index and compute capability come from the
  // description as they would from a topology file's attributes, and no
  // NVLink is probed.
  for (size_t r = 0; r < gpus.size(); r++) {
    struct ncclXmlNode* pci;
    NCCLCHECK(ncclTopoGetPciNode(xml, gpus[r].busId, &pci));
    NCCLCHECK(xmlSetAttrIfUnset(pci, "class", "0x03"));
    NCCLCHECK(ncclTopoGetXmlFromSys(pci, xml));
    struct ncclXmlNode* gpu;
    NCCLCHECK(xmlGetSub(pci, "gpu", &gpu));
    if (gpu == nullptr) NCCLCHECK(xmlAddNode(xml, pci, "gpu", &gpu));
    // As a file gives them: what it says wins.
    int index;
    NCCLCHECK(xmlGetAttrIndex(gpu, "dev", &index));
    if (index == -1) NCCLCHECK(xmlSetAttrInt(gpu, "dev", (int)r));
    NCCLCHECK(xmlGetAttrIndex(gpu, "sm", &index));
    if (index == -1) NCCLCHECK(xmlSetAttrInt(gpu, "sm", gpus[r].sm));
    // NVLink as NVML would give it, in the form NCCL's own dump of an
    // NVSwitch node has (the lent 4 x H100 host's nccl-topo.xml): a GPU with
    // an nvlink child is not asked of NVML again (ncclTopoGetXmlFromGpu).
    struct ncclXmlNode* nvlink;
    NCCLCHECK(xmlGetSub(gpu, "nvlink", &nvlink));
    if (nvlink == nullptr && gpus[r].nvswitch > 0) {
      NCCLCHECK(xmlAddNode(xml, gpu, "nvlink", &nvlink));
      NCCLCHECK(xmlSetAttr(nvlink, "target", "fffffff:ff:ff.0"));
      NCCLCHECK(xmlSetAttrInt(nvlink, "count", gpus[r].nvswitch));
      NCCLCHECK(xmlSetAttr(nvlink, "tclass", "0x068000"));
    }
    // NVLink to a peer GPU as ncclTopoGetXmlFromGpu records what NVML's
    // nvmlDeviceGetNvLinkRemotePciInfo gives for each active link: one
    // nvlink child per remote bus id (lower case, NVML's 4-digit-domain
    // busId of its v1 nvmlPciInfo_t), its count the links to it. The
    // target class is left for NCCL's own loop below to read from the
    // peer's sysfs `class`, as it does for NVML's answers.
    for (const NvPair& p : nvPairs) {
      const std::string* peer = nullptr;
      if (strcasecmp(p.a.c_str(), gpus[r].busId) == 0) peer = &p.b;
      if (strcasecmp(p.b.c_str(), gpus[r].busId) == 0) peer = &p.a;
      if (peer == nullptr) continue;
      std::string lower(*peer);
      for (char& c : lower) c = (char)tolower((unsigned char)c);
      NCCLCHECK(xmlAddNode(xml, gpu, "nvlink", &nvlink));
      NCCLCHECK(xmlSetAttr(nvlink, "target", lower.c_str()));
      NCCLCHECK(xmlSetAttrInt(nvlink, "count", p.count));
    }
    // C2C as ncclTopoGetXmlFromGpu fills it from NVML for sm >= 90: the
    // active links' count and the last one's NVML_FI_DEV_C2C_LINK_GET_MAX_BW
    // in MB/s; 44712 is what a GH200 reports (`nvidia-smi c2c -s`: 44.712
    // GB/s a link; docs/nccl-harness.md).
    struct ncclXmlNode* c2c;
    NCCLCHECK(xmlGetSub(gpu, "c2c", &c2c));
    if (c2c == nullptr && gpus[r].c2c > 0 && gpus[r].sm >= 90) {
      NCCLCHECK(xmlAddNode(xml, gpu, "c2c", &c2c));
      NCCLCHECK(xmlSetAttrInt(c2c, "bw", 44712));
      NCCLCHECK(xmlSetAttrInt(c2c, "count", gpus[r].c2c));
    }
    NCCLCHECK(ncclTopoGetXmlFromGpu(pci, NULL, xml, &gpu));
    NCCLCHECK(xmlSetAttrInt(gpu, "keep", 1));
    NCCLCHECK(xmlSetAttrInt(gpu, "rank", (int)r));
    // xmlInitAttrInt (static in topo.cc): only where the file gives none.
    NCCLCHECK(xmlGetAttrIndex(gpu, "gdr", &index));
    if (index == -1) NCCLCHECK(xmlSetAttrInt(gpu, "gdr", gpus[r].gdr));
  }
  if (nets.empty()) NCCLCHECK(ib_plugin());
  for (const Net& n : nets) {
    std::string link = std::string("/sys/class/infiniband/") + n.name + "/device";
    char* path = realpath(link.c_str(), NULL);
    netPaths.push_back(path ? path : "");
    free(path);
  }
  struct ncclTopoNetInfo netInfo = {};
  netInfo.coll = 0;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 30, 0)
  netInfo.net = 1;
  netInfo.maxDevsPerNic = NCCL_NET_MAX_DEVS_PER_NIC;
  // ncclTopoGetMergePolicy (static in topo.cc) without NCCL_NET_MERGE_POLICY;
  // read only when virtual NICs are made, which they are not here.
  netInfo.mergePolicy = NCCL_NET_MERGE_POLICY_ALL;
#endif
  netInfo.netPluginIndex = 0;
  netInfo.dmaBufSupport = dmabuf && ncclParamDmaBufEnable() != 0;
  netInfo.getDevCount = ibPlugin ? ibDevCount : netDevCount;
  netInfo.setVirtDevCount = ibPlugin ? ibSetVirtDevCount : netSetVirtDevCount;
  netInfo.name = "IB";
  netInfo.getProperties = ibPlugin ? ibProperties : netProperties;
  netInfo.makeVDevice = ibPlugin ? ncclNetIb.makeVDevice : NULL;
  netInfo.devices = ibPlugin ? ncclNetIb.devices : netDevices;
  NCCLCHECK(ncclTopoGetFusionEnv(&netInfo.mergeLevel, &netInfo.forceMerge));
  NCCLCHECK(ncclTopoProcessNet(xml, NULL, &netInfo));
  NCCLCHECK(order_cpus(xml));
  NCCLCHECK(ncclTopoTrimXml(xml));
  if (dump != nullptr) NCCLCHECK(ncclTopoDumpXmlToFile(dump, xml));
  return decide_levels(xml);
}

// "NAME,key=value,...": @name gets NAME; each key's int goes to @fields.
static bool parse(char* arg, const char** name, std::initializer_list<std::pair<const char*, int*>> fields) {
  char* save;
  *name = strtok_r(arg, ",", &save);
  if (*name == nullptr) return false;
  for (char* kv = strtok_r(NULL, ",", &save); kv != nullptr; kv = strtok_r(NULL, ",", &save)) {
    char* eq = strchr(kv, '=');
    if (eq == nullptr) return false;
    *eq = '\0';
    bool known = false;
    for (auto& f : fields) {
      if (strcmp(kv, f.first) == 0) {
        char* end;
        *f.second = (int)strtol(eq + 1, &end, 10);
        if (*end != '\0') return false;
        known = true;
      }
    }
    if (!known) return false;
  }
  return true;
}

static int usage() {
  fprintf(stderr,
          "usage: nccl-harness TOPOLOGY.xml                 (NCCL's topology XML)\n"
          "       nccl-harness --sysfs ROOT [--cpu VENDOR,family=F,model=M]\n"
          "                    --gpu BUSID[,sm=90][,gdr=1][,nvswitch=18][,c2c=10]... [--net NAME[,gdr=1]...]\n"
          "                    [--dmabuf yes|no] [--distances yes|no] [--data-direct NAME=PATH]... [--dump FILE]\n"
          "                    [--levels LEVEL,...] [--nvlink BUSID,BUSID,COUNT]...\n"
          "  ROOT holds the node's sys/ tree; BUSID as 0000:03:00.0; NAME an RDMA device\n"
          "  (sys/class/infiniband/NAME); gdr=0: the GPU or NIC cannot register GPU memory;\n"
          "  nvswitch=N: N NVLinks to NVSwitches, as NVML reports on an HGX board;\n"
          "  c2c=N: N active C2C links to the GPU's CPU, as NVML reports on Grace Hopper;\n"
          "  --nvlink A,B,N: GPUs A and B joined by N NVLinks (bridges, a mesh), as NVML reports;\n"
          "  --cpu arm64: the CPUs an arm64 NCCL describes (no vendor, no cpuid).\n"
          "  Without --net: NCCL's own IB plugin over the verbs double (the node's devices);\n"
          "  --data-direct NAME=PATH: mlx5 device NAME's Data Direct function, PATH as the\n"
          "  kernel gives it (/devices/...); --dmabuf yes: the node\n"
          "  can register through DMA-BUF (CUDA's attribute, the kernel's ibv_reg_dmabuf_mr);\n"
          "  --distances yes: every NIC registers GPU memory, so each path is NCCL's distance;\n"
          "  --levels default,PIX,...: the decisions at each NCCL_NET_GDR_LEVEL (default: as set;\n"
          "  distances: as --distances yes), each block headed `level LEVEL`\n");
  return 2;
}

int main(int argc, char** argv) {
  // NCCL's own switch for its unit tests "that don't want to validate
  // against NVML at all since they are pretending to be on other hw"
  // (graph/paths.cc, ncclTopoCheckP2p): there is no NVML here, so P2P
  // between GPUs is decided by the topology alone.
  setenv("NCCL_IGNORE_DISABLED_P2P", "2", 1);
  const char* what;
  ncclResult_t result;
  if (argc == 2 && argv[1][0] != '-') {
    what = argv[1];
    result = from_file(argv[1]);
  } else {
    const char* root = nullptr;
    const char* dump = nullptr;
    std::string dataDirect;
    for (int i = 1; i < argc; i++) {
      if (i + 1 >= argc) return usage();
      char* value = argv[++i];
      if (strcmp(argv[i - 1], "--sysfs") == 0) {
        root = value;
      } else if (strcmp(argv[i - 1], "--dump") == 0) {
        dump = value;
      } else if (strcmp(argv[i - 1], "--gpu") == 0) {
        Gpu g;
        if (!parse(value, &g.busId, {{"sm", &g.sm}, {"gdr", &g.gdr}, {"nvswitch", &g.nvswitch}, {"c2c", &g.c2c}})) return usage();
        gpus.push_back(g);
      } else if (strcmp(argv[i - 1], "--nvlink") == 0) {
        char a[32], b[32];
        int count;
        char end;
        if (sscanf(value, "%31[^,],%31[^,],%d%c", a, b, &count, &end) != 3 || count < 1) return usage();
        nvPairs.push_back({a, b, count});
      } else if (strcmp(argv[i - 1], "--net") == 0) {
        Net n;
        if (!parse(value, &n.name, {{"gdr", &n.gdr}})) return usage();
        nets.push_back(n);
      } else if (strcmp(argv[i - 1], "--levels") == 0) {
        // "default,PIX,PHB,SYS": decide_levels
        for (char* save = nullptr, *l = strtok_r(value, ",", &save); l != nullptr; l = strtok_r(nullptr, ",", &save)) {
          levels.push_back(l);
        }
      } else if (strcmp(argv[i - 1], "--distances") == 0) {
        everyNicGdr = strcmp(value, "yes") == 0;
      } else if (strcmp(argv[i - 1], "--dmabuf") == 0) {
        // "--dmabuf yes": the node's DMA-BUF support (above)
        dmabuf = strcmp(value, "yes") == 0;
      } else if (strcmp(argv[i - 1], "--data-direct") == 0) {
        // "NAME=/devices/...": the kernel's answer for NAME's Data Direct
        // function (verbs_double.cc, mlx5dv_get_data_direct_sysfs_path)
        dataDirect += std::string(dataDirect.empty() ? "" : ";") + value;
      } else if (strcmp(argv[i - 1], "--cpu") == 0) {
        if (!parse(value, &cpuVendor, {{"family", &cpuFamily}, {"model", &cpuModel}})) return usage();
      } else {
        return usage();
      }
    }
    if (root == nullptr || gpus.empty()) return usage();
    // node_files.cc serves /sys from here, and the verbs double reads it.
    setenv("NCCL_HARNESS_SYSFS_ROOT", root, 1);
    // The verbs double beside this program (node_files.cc hands it to
    // NCCL's dlopen of libibverbs and libmlx5), told the node's DMA-BUF
    // support and Data Direct functions.
    if (getenv("NCCL_HARNESS_VERBS_DOUBLE") == nullptr) {
      char self[PATH_MAX];
      ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
      if (n > 0) {
        self[n] = '\0';
        std::string dir(self);
        dir = dir.substr(0, dir.rfind('/'));
        setenv("NCCL_HARNESS_VERBS_DOUBLE", (dir + "/libverbs-double.so").c_str(), 1);
      }
    }
    setenv("NCCL_HARNESS_DMABUF", dmabuf ? "1" : "0", 1);
    setenv("NCCL_HARNESS_DATA_DIRECT", dataDirect.c_str(), 1);
    // The IB plugin's out-of-band IP interface (net_ib.cc, ncclFindInterfaces):
    // the loopback, which every host has; it decides no path.
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    what = root;
    result = from_sysfs(dump);
  }
  if (result != ncclSuccess) {
    fprintf(stderr, "nccl-harness: NCCL's code failed on %s (ncclResult_t %d); NCCL_DEBUG=WARN shows NCCL's reason\n",
            what, (int)result);
    return 1;
  }
  return 0;
}
