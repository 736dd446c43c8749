// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
// The node's files as NCCL opens them (docs/nccl-harness.md, "The node"):
// nccl-harness is linked with -Wl,--wrap=fopen, so every fopen of NCCL's
// code comes here first. NCCL reads /etc/nccl.conf whatever else is set
// (misc/param.cc, initEnvFunc: NCCL_CONF_FILE, or else ~/.nccl.conf with
// the home directory from getpwuid, not $HOME; then /etc/nccl.conf; the
// first value of a name wins). The harness must read the described node's,
// not the build host's: NCCL_HARNESS_ETC_NCCL_CONF and
// NCCL_HARNESS_HOME_NCCL_CONF name the files that stand for them, and
// without one there is none, as on a node without it. Every other path is
// NCCL's own fopen.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" FILE* __real_fopen(const char* path, const char* mode);

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

extern "C" FILE* __wrap_fopen(const char* path, const char* mode) {
  if (path != nullptr && strcmp(path, "/etc/nccl.conf") == 0) {
    return stand_in("NCCL_HARNESS_ETC_NCCL_CONF", mode);
  }
  // The user's file, <home>/.nccl.conf; NCCL_CONF_FILE, when set, is
  // opened under its own name and reaches NCCL's fopen.
  if (path != nullptr && ends_with(path, "/.nccl.conf") && getenv("NCCL_CONF_FILE") == nullptr) {
    return stand_in("NCCL_HARNESS_HOME_NCCL_CONF", mode);
  }
  return __real_fopen(path, mode);
}
