/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Shim: MLNX_OFED's backport 0271 includes <rdma/uverbs_ioctl.h> in
 * peer_mem.c under HAVE_BASECODE_EXTRAS (which MLNX_OFED's configure
 * defines by default) and uses nothing of it there; the kernel's own header
 * needs the whole uverbs stack, which the shimmed ib_verbs.h leaves out.
 * A declaration peer_mem.c used from it would fail the build here.
 */
#ifndef NVPM_SHIM_UVERBS_IOCTL_H
#define NVPM_SHIM_UVERBS_IOCTL_H
#endif
