// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
// nccl-harness (issue 42): NCCL's own topology and GPUDirect RDMA decision
// code, compiled from NCCL's source in the fixtures (xtask/src/nccl_harness.rs
// builds it; docs/nccl-harness.md says what runs and what is stubbed), run
// over one node described as NCCL's topology XML: the form NCCL itself
// reads from NCCL_TOPO_FILE and writes to NCCL_TOPO_DUMP_FILE. What it does
// is the XML half of ncclTopoGetSystem() (graph/topo.cc) followed by the
// calls init.cc makes: the cpus' host_hash rewritten as NCCL rewrites it,
// ncclTopoGetSystemFromXml, ncclTopoComputePaths with no communicator (which
// paths.cc supports: it skips the transports' checks). Then, for every GPU
// and every NIC, what NCCL decided: the path type and bandwidth,
// ncclTopoCheckGdr for reads and for writes, and the intermediate rank of
// PXN. Nothing of NCCL's is re-implemented here; this file only calls it
// and prints.
#include "core.h"
#include "graph.h"
#include "graph/topo.h"
#include "graph/xml.h"
#include "utils.h"
#include <cstdio>
#include <cstdlib>

static const char* gdrMode(enum ncclTopoGdrMode m) {
  switch (m) {
  case ncclTopoGdrModeDisable: return "off";
  case ncclTopoGdrModeDefault: return "on";
  case ncclTopoGdrModePci: return "on-pci";
  default: return "?";
  }
}

static ncclResult_t run(const char* file) {
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
  struct ncclTopoSystem* system;
  NCCLCHECK(ncclTopoGetSystemFromXml(xml, &system, getHostHash()));
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
      printf("gpu %s rank %d net %d path %s bw %g hops %d gdr_read %s gdr_write %s proxy_rank %d\n",
             gpuBus, gpu->gpu.rank, net->net.dev, topoPathTypeStr[path->type], path->bw, path->count,
             gdrMode(read), gdrMode(write), proxy);
    }
  }
  return ncclSuccess;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: nccl-harness TOPOLOGY.xml (NCCL's topology XML)\n");
    return 2;
  }
  // NCCL's own switch for its unit tests "that don't want to validate
  // against NVML at all since they are pretending to be on other hw"
  // (graph/paths.cc, ncclTopoCheckP2p): there is no NVML here, so P2P
  // between GPUs is decided by the topology alone.
  setenv("NCCL_IGNORE_DISABLED_P2P", "2", 1);
  ncclResult_t result = run(argv[1]);
  if (result != ncclSuccess) {
    fprintf(stderr, "nccl-harness: NCCL's code failed on %s (ncclResult_t %d); NCCL_DEBUG=WARN shows NCCL's reason\n",
            argv[1], (int)result);
    return 1;
  }
  return 0;
}
