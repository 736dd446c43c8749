/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Shim for <rdma/ib_verbs.h>, just enough for MLNX_OFED's peer_mem.c: the
 * one field of struct ib_device it reads (the device the client maps for).
 * The real header describes a whole RDMA stack that this harness does not
 * have; nothing else of it is used by peer_mem.c (see ../README.md).
 */
#ifndef NVPM_SHIM_IB_VERBS_H
#define NVPM_SHIM_IB_VERBS_H

#include <linux/device.h>
#include <linux/types.h>

struct ib_device {
	struct device *dma_device;
};

#endif
