// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
// The node's files as NCCL opens them (docs/nccl-harness.md, "The node"):
// nccl-harness is linked with -Wl,--wrap= for fopen, realpath, opendir,
// access and dlopen, so every call of NCCL's code to them comes here first. Nothing
// of the build host may reach NCCL's decision:
//  - /sys (and /var/run/nvidia-topologyd, whose virtualTopology.xml NCCL
//    reads without NCCL_TOPO_FILE): NCCL climbs the PCI tree from /sys/class/pci_bus/<bus>/../../<bdf>
//    with realpath, reads attributes with fopen and Broadcom's virtual
//    switch links with opendir (graph/xml.cc; from 2.30 os/linux.cc), all
//    as absolute /sys literals. Under NCCL_HARNESS_SYSFS_ROOT (a directory
//    holding sys/, the described node's tree) they are that tree's, and a
//    resolved path is handed back without the root, so that NCCL parses
//    /sys/devices/pci0000:00/... exactly as on the node. Without the root
//    (an XML topology) there is no /sys at all.
//  - /etc/nccl.conf and ~/.nccl.conf: NCCL reads /etc/nccl.conf whatever
//    else is set (misc/param.cc, initEnvFunc: NCCL_CONF_FILE, or else
//    ~/.nccl.conf with the home directory from getpwuid, not $HOME; then
//    /etc/nccl.conf; the first value of a name wins).
//    NCCL_HARNESS_ETC_NCCL_CONF and NCCL_HARNESS_HOME_NCCL_CONF name the
//    files that stand for them, and without one there is none.
//  - NVML (libnvidia-ml.so.1): never the build host's; the GPU's facts
//    come with the description (harness.cc), as a topology file gives them.
//  - rdma-core (libibverbs.so, libmlx5.so): the verbs double that
//    NCCL_HARNESS_VERBS_DOUBLE names (verbs_double.cc), which reads the
//    described node's devices; never the build host's.
// Every other path is NCCL's own call.
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <string>

extern "C" FILE* __real_fopen(const char* path, const char* mode);
extern "C" char* __real_realpath(const char* path, char* resolved);
extern "C" DIR* __real_opendir(const char* path);
extern "C" void* __real_dlopen(const char* file, int mode);
extern "C" int __real_access(const char* path, int mode);

static FILE* stand_in(const char* variable, const char* mode) {
  const char* file = getenv(variable);
  if (file == nullptr || *file == '\0') {
    errno = ENOENT;
    return nullptr;
  }
  return __real_fopen(file, mode);
}

static bool ends_with(const char* s, const char* tail) {
  size_t n = strlen(s), m = strlen(tail);
  return n >= m && strcmp(s + n - m, tail) == 0;
}

// The node's paths: /sys, and the topology file nvidia-topologyd writes,
// which NCCL reads when NCCL_TOPO_FILE is unset (graph/topo.cc).
static bool in_sys(const char* path) {
  return path != nullptr && (strncmp(path, "/sys/", 5) == 0 || strcmp(path, "/sys") == 0 ||
                             strncmp(path, "/var/run/nvidia-topologyd/", 26) == 0);
}

// The described node's root, resolved once (so that a root reached through
// a symbolic link still prefixes what realpath returns); empty: none.
static const std::string& sysfs_root() {
  static const std::string root = [] {
    const char* given = getenv("NCCL_HARNESS_SYSFS_ROOT");
    if (given == nullptr || *given == '\0') return std::string();
    char* resolved = __real_realpath(given, nullptr);
    std::string r = resolved ? resolved : "";
    free(resolved);
    return r;
  }();
  return root;
}

// @path (a /sys path) inside the root; false where there is no root.
static bool rooted(const char* path, std::string* out) {
  if (sysfs_root().empty()) return false;
  *out = sysfs_root() + path;
  return true;
}

extern "C" FILE* __wrap_fopen(const char* path, const char* mode) {
  if (path != nullptr && strcmp(path, "/etc/nccl.conf") == 0) {
    return stand_in("NCCL_HARNESS_ETC_NCCL_CONF", mode);
  }
  // The user's file, <home>/.nccl.conf; NCCL_CONF_FILE, when set, is
  // opened under its own name and reaches NCCL's fopen.
  if (path != nullptr && ends_with(path, "/.nccl.conf") && getenv("NCCL_CONF_FILE") == nullptr) {
    return stand_in("NCCL_HARNESS_HOME_NCCL_CONF", mode);
  }
  if (in_sys(path)) {
    std::string inside;
    if (!rooted(path, &inside)) {
      errno = ENOENT;
      return nullptr;
    }
    return __real_fopen(inside.c_str(), mode);
  }
  return __real_fopen(path, mode);
}

extern "C" char* __wrap_realpath(const char* path, char* resolved) {
  if (!in_sys(path)) return __real_realpath(path, resolved);
  std::string inside;
  if (!rooted(path, &inside)) {
    errno = ENOENT;
    return nullptr;
  }
  char* full = __real_realpath(inside.c_str(), nullptr);
  if (full == nullptr) return nullptr;
  const std::string& root = sysfs_root();
  // A link that leads out of the described tree leads nowhere on the node.
  if (strncmp(full, root.c_str(), root.size()) != 0 || full[root.size()] != '/') {
    free(full);
    errno = ENOENT;
    return nullptr;
  }
  const char* on_node = full + root.size();
  if (resolved == nullptr) {
    char* copy = strdup(on_node);
    free(full);
    return copy;
  }
  if (strlen(on_node) >= PATH_MAX) {
    free(full);
    errno = ENAMETOOLONG;
    return nullptr;
  }
  strcpy(resolved, on_node);
  free(full);
  return resolved;
}

extern "C" DIR* __wrap_opendir(const char* path) {
  if (!in_sys(path)) return __real_opendir(path);
  std::string inside;
  if (!rooted(path, &inside)) {
    errno = ENOENT;
    return nullptr;
  }
  return __real_opendir(inside.c_str());
}

extern "C" int __wrap_access(const char* path, int mode) {
  if (!in_sys(path)) return __real_access(path, mode);
  std::string inside;
  if (!rooted(path, &inside)) {
    errno = ENOENT;
    return -1;
  }
  return __real_access(inside.c_str(), mode);
}

extern "C" void* __wrap_dlopen(const char* file, int mode) {
  if (file != nullptr && strstr(file, "libnvidia-ml") != nullptr) return nullptr;
  // rdma-core's libraries are the verbs double (verbs_double.cc), whose
  // devices are the described node's, never the build host's.
  if (file != nullptr && (strncmp(file, "libibverbs.so", 13) == 0 || strncmp(file, "libmlx5.so", 10) == 0)) {
    const char* double_ = getenv("NCCL_HARNESS_VERBS_DOUBLE");
    return double_ != nullptr ? __real_dlopen(double_, mode) : nullptr;
  }
  return __real_dlopen(file, mode);
}
