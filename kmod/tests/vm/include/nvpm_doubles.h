/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Test-only interface of the NVIDIA double (nv_p2p_double.ko) and of the
 * PeerDirect core module (mofed_peer_core.ko: MLNX_OFED's real peer_mem.c
 * with the test HCA driver), used by the scenario driver (nvpm_scenarios.ko).
 *
 * The two modules export two kinds of symbols:
 *   - the ABI nv_peer_mem.ko links against (nvidia_p2p_* from NVIDIA 535's
 *     nv-p2p.h; ib_register/unregister_peer_memory_client of MLNX_OFED's
 *     rdma/peer_mem.h, through the recorder in peer_core/hca_driver.c);
 *   - the hooks below, which play the roles nobody else can play in a VM:
 *     a CUDA application (allocate / cudaFree GPU memory), an HCA driver
 *     registering memory through the IB core's umem code, and the counters
 *     that show leaks, double frees and contract violations.
 * Only nvpm_scenarios.ko uses the hooks; nv_peer_mem.ko never sees them.
 */
#ifndef NVPM_DOUBLES_H
#define NVPM_DOUBLES_H

#include <linux/types.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/scatterlist.h>

/* ---------------------------------------------------------------- NVIDIA */

/* Page size of the simulated GPU memory (what nvidia.ko reports). */
#define NVD_GPU_PAGE_SIZE 0x10000ULL

/* Snapshot of the NVIDIA double's counters. */
struct nvd_stats {
	/* objects alive right now (allocated by the double, not yet freed) */
	long allocs_live;	/* GPU allocations ("cudaMalloc") */
	long tables_live;	/* page tables handed out */
	long maps_live;		/* dma mappings handed out */
	/* mappings a client never unmapped, freed with their page table by
	 * put_pages (the driver tidies up; the client leaked them) */
	long maps_dropped;
	/* calls received, per entry point */
	long get_pages, put_pages, get_pages_persistent, put_pages_persistent;
	long dma_map, dma_unmap, free_page_table, free_dma_mapping;
	/* free callbacks invoked (a cudaFree under a live registration) */
	long callbacks;
	/* non-persistent put_pages of a table the driver had already unlinked:
	 * the real driver returns 0 (NV_ERR_OBJECT_NOT_FOUND -> NV_OK) */
	long stale_puts;
	/* free_page_table / free_dma_mapping of a pointer the double no longer
	 * knows: a no-op in 535, a double free in drivers before R470 */
	long stale_frees;
	/* contract violations: anything the real driver would WARN/BUG on, a
	 * use-after-free in the real driver, a leak or a double free */
	long errors;
	/* get_pages calls whose free-callback data was NULL (nv-p2p.h: must
	 * be non-NULL; 535 does not check) */
	long null_data;
	/* failure injection: 1 once the armed call failed */
	long injected;
	char injected_call[32];
	/* the last get_pages / get_pages_persistent request */
	u64 last_get_va, last_get_len;
	/* the last dma_map_pages peer */
	struct pci_dev *last_peer;
	/* the first contract violation, as text */
	char first_error[160];
};

/* Simulated cudaMalloc: GPU memory of @size bytes (a multiple of 64 KiB) at
 * a fresh VA (@va == 0) or at @va. @page_size_type is what get_pages reports
 * (enum nvidia_p2p_page_size_type). Returns the VA, 0 on failure. */
u64 nvd_alloc(u64 va, u64 size, u32 page_size_type);
/* Simulated cudaFree: unlinks every non-persistent page table on it, calls
 * their free callbacks (as the driver does) and then frees them. Persistent
 * tables keep the memory alive until put_pages_persistent. Returns the number
 * of free callbacks called, or -EINVAL for an unknown VA. */
int nvd_free(u64 va);
/* The bus address a peer sees for GPU VA @va (0 when not GPU memory). */
u64 nvd_dma_address(u64 va);
/* Version dma_map_pages writes into new mappings (0: the header's). */
void nvd_set_mapping_version(u32 version);
/* Version get_pages writes into new page tables (0: the header's). */
void nvd_set_page_table_version(u32 version);
/* NVIDIA_P2P_PAGE_TABLE_VERSION of the nv-p2p.h this double was built
 * against: 0x00010002 for a 535-style driver, 0x00020000 for a 580-style one
 * (asked of the double, because the oracle phase can load the other
 * generation's double under the same scenario driver). */
u32 nvd_header_page_table_version(void);
/* page_table->flags of new tables (580's NVIDIA_P2P_PAGE_TABLE_FLAGS_*);
 * false, and nothing set, when the driver's page table has no flags (before
 * 580). */
bool nvd_set_page_table_flags(u32 flags);
/* Arm failure injection: the @nth next call among get_pages, put_pages,
 * get_pages_persistent, put_pages_persistent, dma_map_pages and
 * dma_unmap_pages fails (0 disarms). Acquiring calls fail with @err and do
 * nothing; releasing calls release and then return @err (a caller must not
 * release again). */
void nvd_fail_nth(long nth, int err);
/* cudaFree of @va from inside the @nth next non-persistent get_pages on it
 * (0 disarms), after the page table is handed out and with the driver's
 * lock held: the free callback runs before get_pages returns, on the
 * caller's thread, as a concurrent cudaFree can make it run on real
 * hardware while the core holds its mapping lock. */
void nvd_free_during_get_pages(u64 va, long nth);
void nvd_get_stats(struct nvd_stats *out);
/* True while a free callback runs on the calling thread. */
bool nvd_in_callback(void);
/* Zero the contract-error counter and text; returns the old count. */
long nvd_reset_errors(void);

/* ------------------------------------------------------------- PeerDirect */

/*
 * mofed_peer_core.ko: MLNX_OFED's peer_mem.c (the real PeerDirect core) with
 * a test HCA driver and a recorder between clients and core
 * (peer_core/hca_driver.c).
 */

#define PCD_NO_INVALIDATION_ID U32_MAX

enum pcd_umem_state { PCD_UNMAPPED, PCD_MAPPED, PCD_INVALIDATED };

struct pcd_client;
struct ib_umem;

/* One registration of the simulated HCA's MR (an ib_umem of the real core). */
struct pcd_umem {
	struct kref kref;
	struct list_head node;		/* live registrations */
	struct ib_umem *umem;		/* the core's; NULL once released */
	struct pcd_client *client;
	void *client_ctx;
	u32 xa_id;			/* the core_context handed to get_pages */
	struct sg_table sgt;		/* the core's sg table after registration */
	int nmap;
	unsigned long addr;
	size_t size;
	bool activated;			/* invalidation notifier armed */
	/* observations */
	int invalidations;		/* invalidate callbacks naming it */
	u64 invalidated_context;	/* the core_context they named */
	int hca_stops;			/* the core told the HCA to stop DMA */
	int inval_unmaps;		/* dma_unmap calls made inside the core's invalidation */
	int teardown_unmaps;		/* dma_unmap calls made outside it */
	int lock_contended;		/* teardown found the mapping lock held */
	int dma_unmap_ret;		/* return of the last dma_unmap */
};

struct pcd_client_info {
	char name[64];
	char version[16];
	bool new_style;			/* version[15] != 0 */
	size_t ex_size;
	u32 flags;
	bool invalidation;		/* passed a non-NULL invalidate pointer */
	bool slot_filled;		/* and still holds the callback it got */
};

/* What a client holds, as the core has handed it out and taken it back. */
struct pcd_client_counts {
	long contexts_live;		/* acquire() == 1 not yet released */
	long pinned_live;		/* get_pages() ok without put_pages() */
	long mapped_live;		/* dma_map() ok without dma_unmap() */
	long sg_live;			/* sg tables dma_map() built, not yet
					 * freed (sg_free_table) */
};

/* One client name's counts, kept across unloads (see pcd_ledger). */
struct pcd_ledger_entry {
	char name[64];
	struct pcd_client_counts counts;
	bool sg_tracked;		/* sg_live is real (the kprobe is armed) */
};

struct pcd_stats {
	long clients_live;		/* clients registered now */
	long registrations, unregistrations, umems_live;
	long invalidations;		/* invalidate callbacks received */
	long unknown_tickets;		/* ...naming no live registration (benign) */
	long errors;
	char first_error[160];
};

/* Register memory like MLNX_OFED's ib_umem_get_peer(): the real core asks
 * each client (registration order, skipping clients that need invalidation
 * unless @inval_supp; with @client only that client accepts), get_pages,
 * dma_map; then the invalidation notifier is armed. Returns 0 and *out,
 * -ENXIO when no client claims the range, or the client's error. */
int pcd_umem_get(unsigned long addr, size_t size, bool inval_supp,
		 const char *client, struct pcd_umem **out);
/* ib_umem_stop_invalidation_notifier() + ib_peer_umem_release(). */
void pcd_umem_release(struct pcd_umem *umem);
enum pcd_umem_state pcd_umem_state(struct pcd_umem *umem);
/* Extra references, to inspect a umem after pcd_umem_release(). */
void pcd_umem_hold(struct pcd_umem *umem);
void pcd_umem_put(struct pcd_umem *umem);
/* The client's own calls, for the scenarios that test them one by one. */
int pcd_client_acquire(const char *client, unsigned long addr, size_t size,
		       void **ctx);
void pcd_client_release(const char *client, void *ctx);
int pcd_client_dma_map_after_failed_get_pages(const char *client, unsigned long addr, size_t size,
					      int *get_ret, int *map_ret);
unsigned long pcd_umem_page_size(struct pcd_umem *umem);
const char *pcd_umem_client_name(struct pcd_umem *umem);
/* Registered clients in order; returns their number (at most @max). */
int pcd_clients(struct pcd_client_info *out, int max);
int pcd_client_counts(const char *client, struct pcd_client_counts *out);
/* Every client name that has registered since the core module loaded, with
 * what it still holds; returns their number (at most @max). */
int pcd_ledger(struct pcd_ledger_entry *out, int max);
void pcd_get_stats(struct pcd_stats *out);
long pcd_reset_errors(void);
/* Registering an nth live client fails (returns NULL) until disarmed (0). */
void pcd_fail_register_nth(long nth);
/* The device handed to dma_map (embedded in a zeroed struct pci_dev). */
struct device *pcd_dma_device(void);

#endif
