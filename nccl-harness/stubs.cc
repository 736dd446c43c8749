// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
// What nccl-harness links in place of the parts of NCCL (and of the CUDA
// runtime) that the topology TUs reference but a topology read from XML
// with no communicator does not reach (docs/nccl-harness.md, "Stubs").
// Each says what it stands for. The ones marked "unreached" abort with
// their name if NCCL ever calls them, so a new NCCL release that starts to
// reach one fails the harness loudly instead of computing with a stand-in.
#include "core.h"
#include "comm.h"
#include "graph.h"
#include "transport.h"
#include "bootstrap.h"
#include "net.h"
#include "env.h"
#include "param.h"
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 30, 0)
#include "gin.h"
#include "rma.h"
#include "socket.h"
#include "cudawrap.h"
#endif
#include <cstdio>
#include <cstdlib>
#include <mutex>

[[noreturn]] static void unreached(const char* name) {
  fprintf(stderr, "nccl-harness: NCCL called %s, which the harness does not provide (docs/nccl-harness.md)\n", name);
  abort();
}

// transport.cc's table, read by paths.cc only with a communicator.
struct ncclTransport* ncclTransports[NTRANSPORTS + 1] = {};

// NCCL's ncclInitEnv (init.cc) runs ncclEnvPluginInit (plugin/env.cc) once:
// initEnv() reads the configuration files into the environment
// (misc/param.cc), then an environment plugin is loaded. The harness
// takes NCCL's internal plugin, plain getenv (plugin/env/env_v1.cc), and
// loads none that NCCL_ENV_PLUGIN names.
ncclResult_t ncclInitEnv(void) {
  static std::once_flag once;
  std::call_once(once, initEnv);
  return ncclSuccess;
}
const char* ncclEnvPluginGetEnv(const char* name) { return getenv(name); }
bool ncclEnvPluginInitialized(void) { return true; }

// Unreached: channels, graphs, plugins and the bootstrap belong to a
// communicator, and the harness has none.
ncclResult_t initChannel(struct ncclComm*, int) { unreached("initChannel"); }
ncclResult_t ncclTopoGetNetDev(struct ncclComm*, int, struct ncclTopoGraph*, int, int, int64_t*, int*, int*) {
  unreached("ncclTopoGetNetDev");
}
ncclResult_t ncclNetGetDevCount(int, int*, int*) { unreached("ncclNetGetDevCount"); }
ncclResult_t ncclCollNetGetDevCount(int, int*, int*) { unreached("ncclCollNetGetDevCount"); }
ncclResult_t ncclNetSetVirtDevCount(int, int) { unreached("ncclNetSetVirtDevCount"); }
ncclResult_t ncclCollNetSetVirtDevCount(int, int) { unreached("ncclCollNetSetVirtDevCount"); }
int64_t ncclParamWorkArgsBytes() { unreached("ncclParamWorkArgsBytes"); }
ncclResult_t bootstrapIntraNodeAllGather(void*, int*, int, int, void*, int) {
  unreached("bootstrapIntraNodeAllGather");
}

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 30, 0)
// 2.30's GIN and RMA plugins (ncclTopoGetSystem imports their devices),
// and what os/linux.cc, the home of 2.30's sysfs readers, references
// beside them: a thread stack size, CUDA host registration (its socket
// functions are misc/socket.cc's, compiled for the IB plugin).
ncclResult_t ncclGinGetDevCount(int, int*, int*) { unreached("ncclGinGetDevCount"); }
ncclResult_t ncclRmaGetDevCount(int, int*, int*) { unreached("ncclRmaGetDevCount"); }
int64_t ncclParamSetCpuStackSize() { unreached("ncclParamSetCpuStackSize"); }
extern "C" {
cudaError_t cudaGetLastError(void) { unreached("cudaGetLastError"); }
cudaError_t cudaHostGetDevicePointer(void**, void*, unsigned int) { unreached("cudaHostGetDevicePointer"); }
cudaError_t cudaHostRegister(void*, size_t, unsigned int) { unreached("cudaHostRegister"); }
cudaError_t cudaHostUnregister(void*) { unreached("cudaHostUnregister"); }
cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode*) {
  unreached("cudaThreadExchangeStreamCaptureMode");
}
}
#endif

// Unreached: the IB plugin's GIN (GPU-initiated networking) over DOCA
// GPUNetIO, which a communicator sets up (transport/gdaki, 2.30.7
// transport/net_ib/gdaki); its table in net_ib names these.
ncclResult_t ncclGinGdakiDestroyContext(void*) { unreached("ncclGinGdakiDestroyContext"); }
ncclResult_t ncclGinGdakiDeregMrSym(void*, void*) { unreached("ncclGinGdakiDeregMrSym"); }
ncclResult_t ncclGinGdakiProgress(void*) { unreached("ncclGinGdakiProgress"); }
ncclResult_t ncclGinGdakiQueryLastError(void*, bool*) { unreached("ncclGinGdakiQueryLastError"); }
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 30, 0)
ncclResult_t ncclGinGdakiCreateContext(void*, int, int, int, int, int, int, void**, ncclNetDeviceHandle_v7_t**) {
  unreached("ncclGinGdakiCreateContext");
}
ncclResult_t ncclGinGdakiRegMrSym(void*, void*, size_t, int, uint64_t, void**, void**) {
  unreached("ncclGinGdakiRegMrSym");
}
// The CUDA driver entry points (misc/cudawrap.cc fills them from
// cuGetProcAddress) that 2.30's GIN code in net_ib/gin.cc names.
static CUresult cuDeviceGetAttributeUnreached(int*, CUdevice_attribute, CUdevice) {
  unreached("cuDeviceGetAttribute");
}
static CUresult cuGetErrorStringUnreached(CUresult, const char**) { unreached("cuGetErrorString"); }
PFN_cuDeviceGetAttribute_v2000 pfn_cuDeviceGetAttribute = cuDeviceGetAttributeUnreached;
PFN_cuGetErrorString_v6000 pfn_cuGetErrorString = cuGetErrorStringUnreached;
#else
ncclResult_t ncclGinGdakiCreateContext(void*, int, int, void**, ncclNetDeviceHandle_v7_t**) {
  unreached("ncclGinGdakiCreateContext");
}
ncclResult_t ncclGinGdakiRegMrSym(void*, void*, size_t, int, void**, void**) { unreached("ncclGinGdakiRegMrSym"); }
#endif

// The CUDA runtime: there is no GPU here. NCCL's topology code asks it
// only for a GPU missing from NVML (graph/xml.cc) and when logging with
// NCCL_DEBUG; the answer is the runtime's own for a machine without one.
extern "C" {
cudaError_t cudaGetDevice(int*) { return cudaErrorNoDevice; }
cudaError_t cudaDeviceGetAttribute(int*, cudaDeviceAttr, int) { return cudaErrorNoDevice; }
cudaError_t cudaDeviceGetPCIBusId(char*, int, int) { return cudaErrorNoDevice; }
cudaError_t cudaGetDeviceProperties_v2(cudaDeviceProp*, int) { return cudaErrorNoDevice; }
const char* cudaGetErrorString(cudaError_t) { return "no CUDA device (nccl-harness has no CUDA runtime)"; }
}
