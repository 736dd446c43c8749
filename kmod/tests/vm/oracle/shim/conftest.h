/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Stand-in for the conftest.h that NVIDIA's build generates (conftest.sh)
 * before compiling nvidia-peermem.c. nvidia-peermem.c reads one result
 * from it: NV_MLNX_IB_PEER_MEM_SYMBOLS_PRESENT, which conftest.sh's
 * "ib_peer_memory_symbols" test sets when the kernel's Module.symvers (or
 * MOFED's) exports ib_register_peer_memory_client. Here the PeerDirect core
 * under test (mofed_peer_core.ko) exports it, so the result is "present";
 * without it nvidia-peermem.c compiles to a module that refuses to load.
 */
#ifndef NVPM_ORACLE_CONFTEST_H
#define NVPM_ORACLE_CONFTEST_H
#define NV_MLNX_IB_PEER_MEM_SYMBOLS_PRESENT
#endif
