/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Shim for MLNX_OFED 25.10's <rdma/ib_umem.h>, just what peer_mem.c uses:
 * struct ib_umem with MLNX_OFED's field names and types, the invalidation
 * function type, the peer memory flags, ib_umem_num_pages() and the
 * invalidation notifier calls. The layout follows MLNX_OFED's header (the
 * fields are read only by peer_mem.c and the harness's HCA driver, both
 * compiled against this file, so only names and types matter).
 */
#ifndef NVPM_SHIM_IB_UMEM_H
#define NVPM_SHIM_IB_UMEM_H

#include <linux/mm.h>
#include <linux/scatterlist.h>
#include <rdma/ib_verbs.h>

struct ib_umem {
	struct ib_device *ibdev;
	struct mm_struct *owning_mm;
	u64 iova;
	size_t length;
	unsigned long address;
	u32 writable : 1;
	u32 is_odp : 1;
	u32 is_dmabuf : 1;
	u32 is_peer : 1;
	struct sg_append_table sgt_append;
};

typedef void (*umem_invalidate_func_t)(struct ib_umem *umem, void *priv);

enum ib_peer_mem_flags {
	IB_PEER_MEM_ALLOW = 1 << 0,
	IB_PEER_MEM_INVAL_SUPP = 1 << 1,
};

static inline size_t ib_umem_num_pages(struct ib_umem *umem)
{
	return (size_t)((ALIGN(umem->iova + umem->length, PAGE_SIZE) -
			 ALIGN_DOWN(umem->iova, PAGE_SIZE))) / PAGE_SIZE;
}

void ib_umem_activate_invalidation_notifier(struct ib_umem *umem,
					    umem_invalidate_func_t func,
					    void *priv);
void ib_umem_stop_invalidation_notifier(struct ib_umem *umem);

#endif
