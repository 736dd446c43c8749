// A double of rdma-core's libibverbs.so.1 and libmlx5.so.1 for NCCL's own
// IB plugin (net_ib.cc; 2.30.7: net_ib/*.cc), which the harness runs as
// NCCL does: it dlopens "libibverbs.so" and "libmlx5.so" and takes each
// function by dlvsym at the version below (misc/ibvsymbols.cc,
// misc/mlx5dvsymbols.cc); node_files.cc hands it this library instead
// (docs/nccl-harness.md, "The IB plugin"). Structures are NCCL's own
// copies of rdma-core's (include/ibvcore.h, include/mlx5/mlx5dvcore.h), so
// what NCCL reads is laid out as it reads it.
//
// What it stands for, and how faithfully:
// - The devices: the node's /sys/class/infiniband/<name>, sorted by name
//   (libibverbs lists them in the order it finds the uverbs devices, which
//   2.28.9 keeps: it decides how NCCL names a merged device and, where the
//   PCI order does not, which NIC a device number picks; 2.30.7 sorts them
//   by PCI address itself; the check takes the same name order:
//   readiness/src/nccl_local_net.rs). Read from
//   $NCCL_HARNESS_SYSFS_ROOT/sys, as the harness sets it.
// - ibv_query_device: phys_port_cnt is the number of ports/<n> the kernel
//   shows; sys_image_guid the device's `sys_image_guid` file (the kernel
//   prints ib_device_attr's as four groups of four hex digits,
//   drivers/infiniband/core/sysfs.c), else one of its own per device (each
//   device of a test tree is its own adapter); max_qp a ConnectX-7's.
// - ibv_query_port: state and link_layer from the port's `state` ("4:
//   ACTIVE") and `link_layer` ("InfiniBand", "Ethernet") files, which the
//   kernel prints from the same query (sysfs.c, state_show,
//   link_layer_show); speed and width a 400 Gb/s NDR 4x port's (no
//   decision of the harness's reads them).
// - ibv_reg_dmabuf_mr and mlx5dv_reg_dmabuf_mr with fd -1 (NCCL's probe):
//   fail with EBADF where $NCCL_HARNESS_DMABUF is "1" (the kernel
//   imports DMA-BUF and rejects the bad fd), else EOPNOTSUPP, as
//   ibv_reg_dmabuf_mr does on a kernel without it.
// - mlx5dv_is_supported: the device's PCI vendor is Mellanox's (0x15b3),
//   as rdma-core's mlx5 provider matches its devices.
// - mlx5dv_get_data_direct_sysfs_path: the kernel's answer to
//   MLX5_IB_METHOD_GET_DATA_DIRECT_SYSFS_PATH (mlx5_ib std_types.c:
//   kobject_get_path of the affiliated Data Direct PCI function), which
//   no sysfs file holds: taken from $NCCL_HARNESS_DATA_DIRECT,
//   "NAME=/devices/...;..." (the path without /sys, as kobject_get_path
//   gives it); a device not listed gets ENODEV, as the kernel answers
//   one without a Data Direct function.
// - mlx5dv_query_device: no optional capability (comp_mask cleared).
// - ibv_get_async_event blocks, as with no event; NCCL's async thread
//   waits there.
// - Queue pairs, completion queues and memory registration are a
//   communicator's work, which the harness never does: each aborts,
//   naming itself, should a release start to reach it.
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "nccl.h"
#include "ibvcore.h"
#include "mlx5/mlx5dvcore.h"

namespace {

std::string sysfs(const std::string& rest) {
  const char* root = getenv("NCCL_HARNESS_SYSFS_ROOT");
  return std::string(root ? root : "") + "/sys/" + rest;
}

std::string read_line(const std::string& path) {
  FILE* f = fopen(path.c_str(), "r");
  if (f == nullptr) return "";
  char buf[256] = "";
  if (fgets(buf, sizeof(buf), f) == nullptr) buf[0] = '\0';
  fclose(f);
  std::string s(buf);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (struct dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

[[noreturn]] void unreached(const char* name) {
  fprintf(stderr, "nccl-harness: the verbs double's %s was reached: a communicator's work, not the topology's\n", name);
  abort();
}

std::vector<struct ibv_device*> devices;

}  // namespace

extern "C" {

struct ibv_device** ibv_get_device_list(int* num) {
  if (devices.empty()) {
    int index = 0;
    for (const std::string& name : entries(sysfs("class/infiniband"))) {
      auto* dev = static_cast<struct ibv_device*>(calloc(1, sizeof(struct ibv_device)));
      dev->node_type = IBV_NODE_CA;
      dev->transport_type = IBV_TRANSPORT_IB;
      snprintf(dev->name, sizeof(dev->name), "%s", name.c_str());
      snprintf(dev->dev_name, sizeof(dev->dev_name), "uverbs%d", index);
      snprintf(dev->dev_path, sizeof(dev->dev_path), "/sys/class/infiniband_verbs/uverbs%d", index);
      snprintf(dev->ibdev_path, sizeof(dev->ibdev_path), "/sys/class/infiniband/%s", name.c_str());
      devices.push_back(dev);
      index++;
    }
  }
  auto** list = static_cast<struct ibv_device**>(calloc(devices.size() + 1, sizeof(struct ibv_device*)));
  std::copy(devices.begin(), devices.end(), list);
  if (num) *num = (int)devices.size();
  return list;
}

void ibv_free_device_list(struct ibv_device** list) { free(list); }

const char* ibv_get_device_name(struct ibv_device* device) { return device->name; }

struct ibv_context* ibv_open_device(struct ibv_device* device) {
  auto* ctx = static_cast<struct ibv_context*>(calloc(1, sizeof(struct ibv_context)));
  ctx->device = device;
  ctx->cmd_fd = -1;
  ctx->async_fd = -1;
  ctx->num_comp_vectors = 1;
  return ctx;
}

int ibv_close_device(struct ibv_context* context) {
  free(context);
  return 0;
}

int ibv_get_async_event(struct ibv_context*, struct ibv_async_event*) {
  for (;;) pause();
}

void ibv_ack_async_event(struct ibv_async_event*) {}

int ibv_query_device(struct ibv_context* context, struct ibv_device_attr* attr) {
  memset(attr, 0, sizeof(*attr));
  std::string dir = sysfs(std::string("class/infiniband/") + context->device->name);
  attr->phys_port_cnt = (uint8_t)entries(dir + "/ports").size();
  std::string guid = read_line(dir + "/sys_image_guid");
  guid.erase(std::remove(guid.begin(), guid.end(), ':'), guid.end());
  if (!guid.empty()) {
    attr->sys_image_guid = strtoull(guid.c_str(), nullptr, 16);
  } else {
    size_t index = std::find(devices.begin(), devices.end(), context->device) - devices.begin();
    attr->sys_image_guid = 0x1000 + index;
  }
  attr->max_qp = 131072;
  attr->vendor_id = 0x02c9;
  return 0;
}

int ibv_query_port(struct ibv_context* context, uint8_t port, struct ibv_port_attr* attr) {
  memset(attr, 0, sizeof(*attr));
  std::string dir = sysfs(std::string("class/infiniband/") + context->device->name + "/ports/" + std::to_string(port));
  std::string state = read_line(dir + "/state");
  if (state.empty()) return EINVAL;
  attr->state = (enum ibv_port_state)atoi(state.c_str());
  std::string layer = read_line(dir + "/link_layer");
  attr->link_layer = layer == "InfiniBand" ? IBV_LINK_LAYER_INFINIBAND
                     : layer == "Ethernet" ? IBV_LINK_LAYER_ETHERNET
                                           : IBV_LINK_LAYER_UNSPECIFIED;
  attr->active_speed = 128;  // NDR
  attr->active_width = 2;    // 4x
  attr->phys_state = attr->state == IBV_PORT_ACTIVE ? 5 : 3;
  attr->active_mtu = IBV_MTU_4096;
  attr->max_mtu = IBV_MTU_4096;
  attr->gid_tbl_len = 256;
  return 0;
}

int ibv_fork_init(void) { return 0; }

const char* ibv_event_type_str(enum ibv_event_type) { return "unknown"; }

struct ibv_pd* ibv_alloc_pd(struct ibv_context* context) {
  auto* pd = static_cast<struct ibv_pd*>(calloc(1, sizeof(struct ibv_pd)));
  pd->context = context;
  return pd;
}

int ibv_dealloc_pd(struct ibv_pd* pd) {
  free(pd);
  return 0;
}

struct ibv_mr* ibv_reg_dmabuf_mr(struct ibv_pd*, uint64_t, size_t, uint64_t, int fd, int) {
  const char* dmabuf = getenv("NCCL_HARNESS_DMABUF");
  errno = (fd < 0 && dmabuf && strcmp(dmabuf, "1") == 0) ? EBADF : EOPNOTSUPP;
  return nullptr;
}

int ibv_query_gid(struct ibv_context*, uint8_t, int, union ibv_gid*) { unreached("ibv_query_gid"); }
int ibv_query_qp(struct ibv_qp*, struct ibv_qp_attr*, int, struct ibv_qp_init_attr*) { unreached("ibv_query_qp"); }
struct ibv_mr* ibv_reg_mr(struct ibv_pd*, void*, size_t, int) { unreached("ibv_reg_mr"); }
struct ibv_mr* ibv_reg_mr_iova2(struct ibv_pd*, void*, size_t, uint64_t, unsigned int) { unreached("ibv_reg_mr_iova2"); }
int ibv_dereg_mr(struct ibv_mr*) { unreached("ibv_dereg_mr"); }
struct ibv_cq* ibv_create_cq(struct ibv_context*, int, void*, struct ibv_comp_channel*, int) { unreached("ibv_create_cq"); }
int ibv_destroy_cq(struct ibv_cq*) { unreached("ibv_destroy_cq"); }
struct ibv_qp* ibv_create_qp(struct ibv_pd*, struct ibv_qp_init_attr*) { unreached("ibv_create_qp"); }
int ibv_modify_qp(struct ibv_qp*, struct ibv_qp_attr*, int) { unreached("ibv_modify_qp"); }
int ibv_destroy_qp(struct ibv_qp*) { unreached("ibv_destroy_qp"); }
int ibv_query_ece(struct ibv_qp*, struct ibv_ece*) { unreached("ibv_query_ece"); }
int ibv_set_ece(struct ibv_qp*, struct ibv_ece*) { unreached("ibv_set_ece"); }

bool mlx5dv_is_supported(struct ibv_device* device) {
  return read_line(sysfs(std::string("class/infiniband/") + device->name + "/device/vendor")) == "0x15b3";
}

int mlx5dv_get_data_direct_sysfs_path(struct ibv_context* context, char* buf, size_t len) {
  const char* list = getenv("NCCL_HARNESS_DATA_DIRECT");
  std::string entries_ = list ? list : "";
  std::string want = std::string(context->device->name) + "=";
  size_t at = 0;
  while (at < entries_.size()) {
    size_t end = entries_.find(';', at);
    if (end == std::string::npos) end = entries_.size();
    std::string entry = entries_.substr(at, end - at);
    if (entry.compare(0, want.size(), want) == 0) {
      std::string path = entry.substr(want.size());
      if (path.size() + 1 > len) return ENOSPC;
      memcpy(buf, path.c_str(), path.size() + 1);
      return 0;
    }
    at = end + 1;
  }
  return ENODEV;
}

struct ibv_mr* mlx5dv_reg_dmabuf_mr(struct ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access, int) {
  return ibv_reg_dmabuf_mr(pd, offset, length, iova, fd, access);
}

int mlx5dv_query_device(struct ibv_context*, struct mlx5dv_context* attrs) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 30, 0)
  attrs->comp_mask = 0;
  return 0;
#else
  // 2.28's headers leave mlx5dv_context opaque: it never asks.
  (void)attrs;
  unreached("mlx5dv_query_device");
#endif
}

struct ibv_qp* mlx5dv_create_qp(struct ibv_context*, struct ibv_qp_init_attr_ex*, struct mlx5dv_qp_init_attr*) {
  unreached("mlx5dv_create_qp");
}

}  // extern "C"
