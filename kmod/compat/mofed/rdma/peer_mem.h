/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * This project's own description of MLNX_OFED's PeerDirect ABI, used when no
 * MLNX_OFED kernel tree is installed at build time. It declares only what
 * nv_peer_mem uses; the layout follows the documented ABI of MLNX_OFED >= 5.1
 * (new-style clients: peer_memory_client_ex, flagged by a 1 in the last byte
 * of the version field) and stays compatible with the legacy ABI of MOFED
 * 4.9 LTS / 5.0 (two extra pointers after release(), which a zeroed
 * ex_size/flags reads as NULL).
 *
 * A module built against this header loads only where the running kernel's
 * ib_core exports these symbols, i.e. with MLNX_OFED installed.
 */
#ifndef NVPM_COMPAT_RDMA_PEER_MEM_H
#define NVPM_COMPAT_RDMA_PEER_MEM_H

#include <linux/types.h>
#include <linux/scatterlist.h>

#define IB_PEER_MEMORY_NAME_MAX 64
#define IB_PEER_MEMORY_VER_MAX 16

/* core_context is a u64 (older MOFED releases used void *, same size on 64-bit). */
#define PEER_MEM_U64_CORE_CONTEXT

struct device;

struct peer_memory_client {
	char name[IB_PEER_MEMORY_NAME_MAX];
	char version[IB_PEER_MEMORY_VER_MAX];
	int (*acquire)(unsigned long addr, size_t size,
		       void *peer_mem_private_data, char *peer_mem_name,
		       void **client_context);
	int (*get_pages)(unsigned long addr, size_t size, int write, int force,
			 struct sg_table *sg_head, void *client_context,
			 u64 core_context);
	int (*dma_map)(struct sg_table *sg_head, void *client_context,
		       struct device *dma_device, int dmasync, int *nmap);
	int (*dma_unmap)(struct sg_table *sg_head, void *client_context,
			 struct device *dma_device);
	void (*put_pages)(struct sg_table *sg_head, void *client_context);
	unsigned long (*get_page_size)(void *client_context);
	void (*release)(void *client_context);
};

enum {
	/*
	 * The client unmaps by itself after the core's invalidate callback
	 * returns: the core marks the registration invalidated and calls
	 * neither dma_unmap nor put_pages for it, inside the invalidation or
	 * later. Without the flag (legacy clients) the core calls dma_unmap and
	 * put_pages from inside the invalidation. (MLNX_OFED's peer_mem.c,
	 * ib_peer_unmap_on_invalidate(); docs/contracts.md.)
	 */
	PEER_MEM_INVALIDATE_UNMAPS = 1 << 0,
};

/*
 * New-style client: version[IB_PEER_MEMORY_VER_MAX - 1] == 1 and ex_size ==
 * sizeof(struct peer_memory_client_ex) tell the core these fields exist.
 */
struct peer_memory_client_ex {
	struct peer_memory_client client;
	size_t ex_size;
	u32 flags;
};

typedef int (*invalidate_peer_memory)(void *reg_handle, u64 core_context);

void *ib_register_peer_memory_client(const struct peer_memory_client *peer_client,
				     invalidate_peer_memory *invalidate_callback);
void ib_unregister_peer_memory_client(void *reg_handle);

#endif
