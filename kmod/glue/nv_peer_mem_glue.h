/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The interface between the C glue and the Rust logic (kmod/src/kernel.rs).
 * Declared here so both directions have prototypes (kernels >= 6.12 build
 * with -Wmissing-prototypes). Kernel convention: 0 or -errno.
 */
#ifndef NV_PEER_MEM_GLUE_H
#define NV_PEER_MEM_GLUE_H

#include <linux/types.h>

/* Values shared with platform.rs (ClientKind, RegistrationStyle, Level). */
#define NVPM_CLIENT_MEM 0u
#define NVPM_CLIENT_NC 1u
#define NVPM_STYLE_INVALIDATE_UNMAPS 0u
#define NVPM_STYLE_LEGACY 1u
#define NVPM_LOG_ERROR 0u
#define NVPM_LOG_DEBUG 1u
#define NVPM_CALLBACK_INVALIDATE 1u
/*
 * platform.rs's copies of nv-p2p.h values: the 64 KiB page size id and the
 * dma mapping version the Rust logic reads. nv_peer_mem_glue.c checks them
 * at compile time against the nv-p2p.h the module is built with.
 */
#define NVPM_NVIDIA_P2P_PAGE_SIZE_64KB 1u
#define NVPM_NVIDIA_P2P_DMA_MAPPING_VERSION 0x00020003u
/* nvpm_c_peer_files_create's answer when the core made memory_peers
 * (platform.rs's PeerFiles::Core); 0 when the module made it. */
#define NVPM_PEER_FILES_CORE 1
/* Size of platform.rs's SavedSgTable. */
#define NVPM_SAVED_SG_TABLE_SIZE 32

/* Implemented in Rust, called by the trampolines. */
int nvpm_rs_init(int peerdirect_support, int persistent_api_support, u32 persistent_available);
void nvpm_rs_exit(void);
int nvpm_rs_acquire(u32 kind, u64 addr, u64 size, void **client_context);
int nvpm_rs_get_pages(void *ctx, u64 core_context);
int nvpm_rs_dma_map(void *ctx, void *sg_head, void *pci_dev, int *nmap);
int nvpm_rs_dma_unmap(void *ctx, void *sg_head);
void nvpm_rs_put_pages(void *ctx, void *sg_head);
u64 nvpm_rs_get_page_size(void);
void nvpm_rs_release(void *ctx);
void nvpm_rs_free_callback(void *data);
void nvpm_rs_probe_free_callback(void *data);
u64 nvpm_rs_peer_stat(u32 kind, u32 counter);

/* Implemented in C, called by Rust. */
int nvpm_c_p2p_get_pages(u64 va, u64 len, void **slot, u32 callback, void *data);
int nvpm_c_p2p_put_pages(u64 va, void *page_table);
int nvpm_c_p2p_get_pages_persistent(u64 va, u64 len, void **slot);
int nvpm_c_p2p_put_pages_persistent(u64 va, void *page_table);
u32 nvpm_c_page_table_page_size(void *page_table);
u32 nvpm_c_page_table_version(void *page_table);
u32 nvpm_c_page_table_version_built(void);
int nvpm_c_p2p_dma_map(void *pci_dev, void *page_table, void **mapping);
int nvpm_c_p2p_dma_unmap(void *pci_dev, void *page_table, void *mapping);
u32 nvpm_c_dma_mapping_version(void *mapping);
int nvpm_c_p2p_free_dma_mapping(void *mapping);
int nvpm_c_p2p_free_page_table(void *page_table);
int nvpm_c_sg_fill(void *sg_head, void *mapping, u64 page_size, void *saved, u32 *nmap);
int nvpm_c_sg_matches(void *sg_head, const void *saved);
void nvpm_c_sg_free(void *table);
void nvpm_c_invalidate(u64 core_context);
int nvpm_c_register(u32 kind, u32 style, const char *name, size_t len);
void nvpm_c_unregister(u32 kind);
int nvpm_c_peer_files_create(u32 kinds);
void nvpm_c_peer_files_remove(void);
void nvpm_c_registry_lock(void);
void nvpm_c_registry_unlock(void);
void nvpm_c_client_lock(void);
void nvpm_c_client_unlock(void);
void *nvpm_c_current_task(void);
void nvpm_c_yield(void);
void *nvpm_c_alloc(size_t size);
void nvpm_c_free(void *ptr);
void nvpm_c_module_get(void);
void nvpm_c_module_put(void);
void nvpm_c_log(u32 level, const char *what, size_t len, s64 value);

#endif
