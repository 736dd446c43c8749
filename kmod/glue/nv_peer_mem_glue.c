// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * nv_peer_mem's C glue: what Rust cannot do portably across kernel versions.
 * Module macros and parameters, the peer_memory_client structures, the
 * trampolines the PeerDirect core and the NVIDIA driver call through
 * function pointers (kept in C so they get the kernel's CFI/IBT treatment),
 * kernel and vendor struct access, and printk. All decisions are made by the
 * Rust logic in kmod/src/.
 *
 * NVPM_PEER_MEM_H and NVPM_NV_P2P_H name the ABI headers chosen by
 * kmod/Makefile: MLNX_OFED's and the NVIDIA driver's when installed, else
 * this project's own descriptions in kmod/compat/.
 */
#include <linux/module.h>
#include <linux/kernel.h>
#include <linux/slab.h>
#include <linux/pci.h>
#include <linux/scatterlist.h>
#include <linux/string.h>
#include <linux/build_bug.h>
#include <linux/spinlock.h>
#include <linux/mutex.h>
#include <linux/sched.h>
#include <linux/kobject.h>
#include <linux/sysfs.h>
#include <linux/kernfs.h>
#include <linux/moduleparam.h>

#include NVPM_PEER_MEM_H
#include NVPM_NV_P2P_H

#include "nv_peer_mem_glue.h"

MODULE_AUTHOR("nv_peer_mem contributors");
MODULE_DESCRIPTION("NVIDIA GPU memory plug-in for PeerDirect (GPUDirect RDMA)");
MODULE_LICENSE("Dual BSD/GPL");
MODULE_VERSION(NVPM_VERSION);

static int peerdirect_support;
module_param(peerdirect_support, int, 0444);
MODULE_PARM_DESC(peerdirect_support,
		 "PeerDirect API of the IB core: 0 [default] for MLNX_OFED >= 5.1, 1 for the legacy API (MLNX_OFED 4.9 LTS, 5.0); other values are refused");

/* Values and client names as NVIDIA's nvidia-peermem (>= 560.28.03). */
static int persistent_api_support = 1;
module_param(persistent_api_support, int, 0444);
MODULE_PARM_DESC(persistent_api_support,
		 "Persistent-pages API: 1 [default] registers only the persistent client, named nv_mem (pages stay pinned until deregistration, no invalidation); 0 [legacy] registers the invalidating nv_mem (free callback, invalidation) plus the persistent client as nv_mem_nc; other values are refused. Without the persistent API in the NVIDIA driver header only the invalidating nv_mem is registered");

static int enable_dbg;
module_param(enable_dbg, int, 0644);
MODULE_PARM_DESC(enable_dbg, "Print debug messages: 0 [default] or 1");

#ifdef NVIDIA_P2P_CAP_GET_PAGES_PERSISTENT_API
#define NVPM_HAVE_PERSISTENT 1u
#else
#define NVPM_HAVE_PERSISTENT 0u
#endif

/*
 * The documented layout of a new-style client (MLNX_OFED >= 5.1), defined
 * here so the module also builds against headers of the legacy API that
 * lack it; legacy registrations leave ex_size and flags zero.
 */
struct nvpm_client_ex {
	struct peer_memory_client client;
	size_t ex_size;
	u32 flags;
};
#define NVPM_PEER_MEM_INVALIDATE_UNMAPS (1u << 0)

static_assert(sizeof(struct sg_table) <= NVPM_SAVED_SG_TABLE_SIZE);
/* The Rust logic's nv-p2p.h values must be this header's: the same 64 KiB
 * page size id, and a dma mapping layout it can read (same major version,
 * the header's minor the same or newer). */
static_assert(NVPM_NVIDIA_P2P_PAGE_SIZE_64KB == NVIDIA_P2P_PAGE_SIZE_64KB,
	      "nv-p2p.h numbers its 64 KiB page size differently from kmod/src/platform.rs");
static_assert((NVIDIA_P2P_DMA_MAPPING_VERSION >> 16) == (NVPM_NVIDIA_P2P_DMA_MAPPING_VERSION >> 16) &&
	      (NVIDIA_P2P_DMA_MAPPING_VERSION & 0xffff) >= (NVPM_NVIDIA_P2P_DMA_MAPPING_VERSION & 0xffff),
	      "nv-p2p.h's nvidia_p2p_dma_mapping version is not one kmod/src/platform.rs can read");

static invalidate_peer_memory mem_invalidate_callback;
static void *reg_handle;
static void *reg_handle_nc;

/* ---- trampolines: the PeerDirect core calls these ---- */

static int nv_mem_acquire(unsigned long addr, size_t size, void *peer_mem_private_data,
			  char *peer_mem_name, void **client_context)
{
	return nvpm_rs_acquire(NVPM_CLIENT_MEM, addr, size, client_context);
}

static int nv_mem_nc_acquire(unsigned long addr, size_t size, void *peer_mem_private_data,
			     char *peer_mem_name, void **client_context)
{
	return nvpm_rs_acquire(NVPM_CLIENT_NC, addr, size, client_context);
}

static int nv_mem_get_pages(unsigned long addr, size_t size, int write, int force,
			    struct sg_table *sg_head, void *client_context, u64 core_context)
{
	return nvpm_rs_get_pages(client_context, core_context);
}

static int nv_mem_dma_map(struct sg_table *sg_head, void *client_context,
			  struct device *dma_device, int dmasync, int *nmap)
{
	return nvpm_rs_dma_map(client_context, sg_head,
			       dma_device ? to_pci_dev(dma_device) : NULL, nmap);
}

static int nv_mem_dma_unmap(struct sg_table *sg_head, void *client_context,
			    struct device *dma_device)
{
	return nvpm_rs_dma_unmap(client_context, sg_head);
}

static void nv_mem_put_pages(struct sg_table *sg_head, void *client_context)
{
	nvpm_rs_put_pages(client_context, sg_head);
}

static unsigned long nv_mem_get_page_size(void *client_context)
{
	return nvpm_rs_get_page_size();
}

static void nv_mem_release(void *client_context)
{
	nvpm_rs_release(client_context);
}

#define NVPM_CLIENT_OPS(acquire_fn)                  \
	.acquire = acquire_fn,                       \
	.get_pages = nv_mem_get_pages,               \
	.dma_map = nv_mem_dma_map,                   \
	.dma_unmap = nv_mem_dma_unmap,               \
	.put_pages = nv_mem_put_pages,               \
	.get_page_size = nv_mem_get_page_size,       \
	.release = nv_mem_release

static struct nvpm_client_ex nv_mem_client = {
	.client = { .version = NVPM_VERSION, NVPM_CLIENT_OPS(nv_mem_acquire) },
};

/* The persistent client is always a plain client: it has nothing to
 * invalidate. Its name (nv_mem or nv_mem_nc) is set at registration. */
static struct peer_memory_client nv_mem_nc_client = {
	.version = NVPM_VERSION, NVPM_CLIENT_OPS(nv_mem_nc_acquire),
};

/* ---- the NVIDIA driver calls these ---- */

static void nv_mem_free_callback(void *data)
{
	nvpm_rs_free_callback(data);
}

/* Memory freed between acquire's probe pin and unpin. */
static void nv_mem_probe_free_callback(void *data)
{
	nvpm_rs_probe_free_callback(data);
}

/* ---- helpers the Rust logic calls ---- */

int nvpm_c_p2p_get_pages(u64 va, u64 len, void **slot, u32 callback, void *data)
{
	return nvidia_p2p_get_pages(0, 0, va, len, (struct nvidia_p2p_page_table **)slot,
				    callback == NVPM_CALLBACK_INVALIDATE ? nv_mem_free_callback
									 : nv_mem_probe_free_callback,
				    data);
}

int nvpm_c_p2p_put_pages(u64 va, void *page_table)
{
	return nvidia_p2p_put_pages(0, 0, va, page_table);
}

#if NVPM_HAVE_PERSISTENT
int nvpm_c_p2p_get_pages_persistent(u64 va, u64 len, void **slot)
{
	return nvidia_p2p_get_pages_persistent(va, len, (struct nvidia_p2p_page_table **)slot, 0);
}

int nvpm_c_p2p_put_pages_persistent(u64 va, void *page_table)
{
	return nvidia_p2p_put_pages_persistent(va, page_table, 0);
}
#else
/* Unreachable: nv_mem_nc is not registered without the persistent API. */
int nvpm_c_p2p_get_pages_persistent(u64 va, u64 len, void **slot)
{
	return -EOPNOTSUPP;
}

int nvpm_c_p2p_put_pages_persistent(u64 va, void *page_table)
{
	return -EOPNOTSUPP;
}
#endif

u32 nvpm_c_page_table_page_size(void *page_table)
{
	return ((struct nvidia_p2p_page_table *)page_table)->page_size;
}

u32 nvpm_c_page_table_version(void *page_table)
{
	return ((struct nvidia_p2p_page_table *)page_table)->version;
}

/* The layout this build reads: the nv-p2p.h it was compiled against. */
u32 nvpm_c_page_table_version_built(void)
{
	return NVIDIA_P2P_PAGE_TABLE_VERSION;
}

int nvpm_c_p2p_dma_map(void *pci_dev, void *page_table, void **mapping)
{
	return nvidia_p2p_dma_map_pages(pci_dev, page_table,
					(struct nvidia_p2p_dma_mapping **)mapping);
}

int nvpm_c_p2p_dma_unmap(void *pci_dev, void *page_table, void *mapping)
{
	return nvidia_p2p_dma_unmap_pages(pci_dev, page_table, mapping);
}

u32 nvpm_c_dma_mapping_version(void *mapping)
{
	return ((struct nvidia_p2p_dma_mapping *)mapping)->version;
}

int nvpm_c_p2p_free_dma_mapping(void *mapping)
{
	return nvidia_p2p_free_dma_mapping(mapping);
}

int nvpm_c_p2p_free_page_table(void *page_table)
{
	return nvidia_p2p_free_page_table(page_table);
}

int nvpm_c_sg_fill(void *sg_head, void *mapping, u64 page_size, void *saved, u32 *nmap)
{
	struct nvidia_p2p_dma_mapping *m = mapping;
	struct scatterlist *sg;
	struct sg_table table;
	unsigned int i;
	int ret;

	/* Build into a local table so sg_head stays untouched on failure. */
	ret = sg_alloc_table(&table, m->entries, GFP_KERNEL);
	if (ret)
		return ret;
	for_each_sg(table.sgl, sg, m->entries, i) {
		sg_set_page(sg, NULL, page_size, 0);
		sg_dma_address(sg) = m->dma_addresses[i];
		sg_dma_len(sg) = page_size;
	}
	*(struct sg_table *)sg_head = table;
	memcpy(saved, &table, sizeof(table));
	*nmap = m->entries;
	return 0;
}

int nvpm_c_sg_matches(void *sg_head, const void *saved)
{
	return memcmp(sg_head, saved, sizeof(struct sg_table)) == 0;
}

void nvpm_c_sg_free(void *table)
{
	sg_free_table(table);
}

void nvpm_c_invalidate(u64 core_context)
{
	if (mem_invalidate_callback)
		mem_invalidate_callback(reg_handle, core_context);
}

/* The client structure of @kind (NVPM_CLIENT_MEM or NVPM_CLIENT_NC). */
static struct peer_memory_client *nvpm_client(u32 kind)
{
	return kind == NVPM_CLIENT_NC ? &nv_mem_nc_client : &nv_mem_client.client;
}

int nvpm_c_register(u32 kind, u32 style, const char *name, size_t len)
{
	char *dst = nvpm_client(kind)->name;

	if (len >= IB_PEER_MEMORY_NAME_MAX)
		return -EINVAL;
	memcpy(dst, name, len);
	dst[len] = '\0';
	if (kind == NVPM_CLIENT_NC) {
		reg_handle_nc = ib_register_peer_memory_client(&nv_mem_nc_client, NULL);
		return reg_handle_nc ? 0 : -EINVAL;
	}
	if (style == NVPM_STYLE_INVALIDATE_UNMAPS) {
		nv_mem_client.client.version[IB_PEER_MEMORY_VER_MAX - 1] = 1;
		nv_mem_client.ex_size = sizeof(nv_mem_client);
		nv_mem_client.flags = NVPM_PEER_MEM_INVALIDATE_UNMAPS;
	}
	reg_handle = ib_register_peer_memory_client(&nv_mem_client.client,
						    &mem_invalidate_callback);
	return reg_handle ? 0 : -EINVAL;
}

void nvpm_c_unregister(u32 kind)
{
	void **handle = kind == NVPM_CLIENT_NC ? &reg_handle_nc : &reg_handle;

	if (*handle)
		ib_unregister_peer_memory_client(*handle);
	*handle = NULL;
}

/*
 * /sys/kernel/mm/memory_peers/<client>/ where MLNX_OFED's core made none
 * (docs/contracts.md, "memory_peers without mm_kobj"). NCCL, UCX and
 * NVSHMEM test for memory_peers/nv_mem/version; the core makes it only on
 * kernels that export mm_kobj, which no module can reach elsewhere. The
 * module makes the same directories under its own kobject,
 * /sys/module/nv_peer_mem/memory_peers/, and links
 * /sys/kernel/mm/memory_peers to it with sysfs_add_link_to_group() on
 * kernel_kobj's "mm" child: exported interfaces only.
 */
static struct kobject *nvpm_peers_holder;
static struct kobject *nvpm_peer_kobj[2];
static bool nvpm_peers_linked;
/* For the memory_peers parameter: NVPM_PEER_FILES_CORE, 0 (the module
 * made them), -ENODATA before any attempt, else the error. */
static int nvpm_peer_files_result = -ENODATA;

/* The core's counters, in the order of platform.rs's peer_stats::Counter;
 * version is not a counter. */
#define NVPM_PEER_VERSION 0xffu
struct nvpm_peer_attr {
	struct kobj_attribute attr;
	u32 counter;
};

static ssize_t nvpm_peer_attr_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	u32 counter = container_of(attr, struct nvpm_peer_attr, attr)->counter;
	u32 kind = kobj == nvpm_peer_kobj[NVPM_CLIENT_NC] ? NVPM_CLIENT_NC : NVPM_CLIENT_MEM;

	/* The core's formats: "%s\n" and "%llu\n". */
	if (counter == NVPM_PEER_VERSION)
		return scnprintf(buf, PAGE_SIZE, "%s\n", nvpm_client(kind)->version);
	return scnprintf(buf, PAGE_SIZE, "%llu\n", nvpm_rs_peer_stat(kind, counter));
}

#define NVPM_PEER_ATTR(_name, _counter)                                         \
	static struct nvpm_peer_attr nvpm_peer_attr_##_name = {                 \
		.attr = __ATTR(_name, 0444, nvpm_peer_attr_show, NULL),         \
		.counter = _counter,                                            \
	}
NVPM_PEER_ATTR(version, NVPM_PEER_VERSION);
NVPM_PEER_ATTR(num_alloc_mrs, 0);
NVPM_PEER_ATTR(num_dealloc_mrs, 1);
NVPM_PEER_ATTR(num_reg_pages, 2);
NVPM_PEER_ATTR(num_dereg_pages, 3);
NVPM_PEER_ATTR(num_reg_bytes, 4);
NVPM_PEER_ATTR(num_dereg_bytes, 5);
NVPM_PEER_ATTR(num_free_callbacks, 6);

static struct attribute *nvpm_peer_attrs[] = {
	&nvpm_peer_attr_version.attr.attr,
	&nvpm_peer_attr_num_alloc_mrs.attr.attr,
	&nvpm_peer_attr_num_dealloc_mrs.attr.attr,
	&nvpm_peer_attr_num_reg_pages.attr.attr,
	&nvpm_peer_attr_num_dereg_pages.attr.attr,
	&nvpm_peer_attr_num_reg_bytes.attr.attr,
	&nvpm_peer_attr_num_dereg_bytes.attr.attr,
	&nvpm_peer_attr_num_free_callbacks.attr.attr,
	NULL,
};

static const struct attribute_group nvpm_peer_group = {
	.attrs = nvpm_peer_attrs,
};

/*
 * Who has /sys/kernel/mm/memory_peers: NVPM_PEER_FILES_CORE when it is a
 * directory listing one of @kinds' clients (the core's, made when it
 * registered the client, under its mutex, before
 * ib_register_peer_memory_client returned), 0 when nobody (the module may
 * make it), -EEXIST when something else made it. Asked before making
 * anything, so a taken name costs no sysfs duplicate warning (with its
 * stack dump) in the kernel log. A directory is checked for before its
 * children are looked up: a link's node has no children.
 */
static int nvpm_peers_owner(u32 kinds)
{
	struct kernfs_node *mm, *peers, *client;
	int ret = -EEXIST;
	u32 kind;

	mm = kernfs_find_and_get(kernel_kobj->sd, "mm");
	if (!mm)
		return -ENOENT;
	peers = kernfs_find_and_get(mm, "memory_peers");
	kernfs_put(mm);
	if (!peers)
		return 0;
	for (kind = 0; kind < ARRAY_SIZE(nvpm_peer_kobj) && kernfs_type(peers) == KERNFS_DIR; kind++) {
		if (!(kinds & (1u << kind)))
			continue;
		client = kernfs_find_and_get(peers, nvpm_client(kind)->name);
		if (client) {
			kernfs_put(client);
			ret = NVPM_PEER_FILES_CORE;
			break;
		}
	}
	kernfs_put(peers);
	return ret;
}

void nvpm_c_peer_files_remove(void)
{
	u32 kind;

	if (nvpm_peers_linked)
		sysfs_remove_link_from_group(kernel_kobj, "mm", "memory_peers");
	nvpm_peers_linked = false;
	for (kind = 0; kind < ARRAY_SIZE(nvpm_peer_kobj); kind++) {
		/* kobject_put removes the directory and its files; kernfs
		 * waits for running show calls first. */
		kobject_put(nvpm_peer_kobj[kind]);
		nvpm_peer_kobj[kind] = NULL;
	}
	kobject_put(nvpm_peers_holder);
	nvpm_peers_holder = NULL;
}

static int nvpm_peer_files_make(u32 kinds)
{
	u32 kind;
	int ret;

	ret = nvpm_peers_owner(kinds);
	if (ret)
		return ret;
	nvpm_peers_holder = kobject_create_and_add("memory_peers", &THIS_MODULE->mkobj.kobj);
	if (!nvpm_peers_holder)
		return -ENOMEM;
	for (kind = 0; kind < ARRAY_SIZE(nvpm_peer_kobj); kind++) {
		if (!(kinds & (1u << kind)))
			continue;
		nvpm_peer_kobj[kind] = kobject_create_and_add(nvpm_client(kind)->name, nvpm_peers_holder);
		if (!nvpm_peer_kobj[kind])
			return -ENOMEM;
		ret = sysfs_create_group(nvpm_peer_kobj[kind], &nvpm_peer_group);
		if (ret)
			return ret;
	}
	/* -EEXIST only if a memory_peers appeared since nvpm_peers_owner. */
	ret = sysfs_add_link_to_group(kernel_kobj, "mm", nvpm_peers_holder, "memory_peers");
	if (ret)
		return ret;
	nvpm_peers_linked = true;
	return 0;
}

int nvpm_c_peer_files_create(u32 kinds)
{
	int ret = nvpm_peer_files_make(kinds);

	if (ret < 0)
		nvpm_c_peer_files_remove();
	nvpm_peer_files_result = ret;
	return ret;
}

/* The memory_peers parameter: read-only, it says who made the files. */
static int nvpm_memory_peers_get(char *buf, const struct kernel_param *kp)
{
	switch (nvpm_peer_files_result) {
	case NVPM_PEER_FILES_CORE:
		return scnprintf(buf, PAGE_SIZE, "core\n");
	case 0:
		return scnprintf(buf, PAGE_SIZE, "nv_peer_mem\n");
	case -ENODATA:
		return scnprintf(buf, PAGE_SIZE, "none\n");
	default:
		return scnprintf(buf, PAGE_SIZE, "failed %d\n", nvpm_peer_files_result);
	}
}

static int nvpm_memory_peers_set(const char *val, const struct kernel_param *kp)
{
	pr_err("nv_peer_mem: memory_peers is read-only: it says who made /sys/kernel/mm/memory_peers\n");
	return -EPERM;
}

static const struct kernel_param_ops nvpm_memory_peers_ops = {
	.set = nvpm_memory_peers_set,
	.get = nvpm_memory_peers_get,
};
module_param_cb(memory_peers, &nvpm_memory_peers_ops, NULL, 0444);
MODULE_PARM_DESC(memory_peers,
		 "Read-only: who made /sys/kernel/mm/memory_peers/<client>/version, the files NCCL, UCX and NVSHMEM test for: core (MLNX_OFED's PeerDirect core, on kernels that export mm_kobj), nv_peer_mem (this module, on the others), failed <errno> (neither: NCCL will not use nv_peer_mem), none (no client registered)");

/*
 * The lock of the context registry, which is kept by the Rust logic
 * (kmod/src/registry.rs): a few stores per registration, never a sleep.
 */
static DEFINE_SPINLOCK(nvpm_registry_lock);

void nvpm_c_registry_lock(void)
{
	spin_lock(&nvpm_registry_lock);
}

void nvpm_c_registry_unlock(void)
{
	spin_unlock(&nvpm_registry_lock);
}

/* The client lock of MLNX_OFED's peer_mem.c contract (see platform.rs). */
static DEFINE_MUTEX(nvpm_client_lock);

void nvpm_c_client_lock(void)
{
	mutex_lock(&nvpm_client_lock);
}

void nvpm_c_client_unlock(void)
{
	mutex_unlock(&nvpm_client_lock);
}

void *nvpm_c_current_task(void)
{
	return current;
}

void nvpm_c_yield(void)
{
	schedule_timeout_uninterruptible(1);
}

void *nvpm_c_alloc(size_t size)
{
	return kzalloc(size, GFP_KERNEL);
}

void nvpm_c_free(void *ptr)
{
	kfree(ptr);
}

void nvpm_c_module_get(void)
{
	__module_get(THIS_MODULE);
}

void nvpm_c_module_put(void)
{
	module_put(THIS_MODULE);
}

void nvpm_c_log(u32 level, const char *what, size_t len, s64 value)
{
	if (level == NVPM_LOG_ERROR)
		pr_err("nv_peer_mem: %.*s: %lld\n", (int)len, what, value);
	else if (READ_ONCE(enable_dbg))
		pr_info("nv_peer_mem: %.*s: %lld\n", (int)len, what, value);
}

static int __init nv_peer_mem_init(void)
{
	return nvpm_rs_init(peerdirect_support, persistent_api_support, NVPM_HAVE_PERSISTENT);
}

/*
 * No free callback may run module code after unload (docs/contracts.md,
 * "Late free callbacks"). By now every page table the module got was put
 * back or has had its free callback called (a failed put keeps a module
 * reference until its callback), so none can start; one may still be
 * running, past the point where it dropped its references. nvidia.ko calls
 * free callbacks under RM's API lock, which every nvidia_p2p_get_pages
 * takes (535: rm_p2p_get_pages in osapi.c): a get_pages that fails (VA 0
 * is never GPU memory) returns only after such a callback has returned.
 */
static void nvpm_wait_for_running_free_callbacks(void)
{
	struct nvidia_p2p_page_table *page_table = NULL;

	/* The data is no ticket (tickets count up from 1 and never reach all
	 * ones, kmod/src/registry.rs): a callback finds no context with it. */
	if (!nvidia_p2p_get_pages(0, 0, 0, 64u << 10, &page_table,
				  nv_mem_probe_free_callback, (void *)ULONG_MAX))
		nvidia_p2p_put_pages(0, 0, 0, page_table);
}

static void __exit nv_peer_mem_exit(void)
{
	nvpm_rs_exit();
	nvpm_wait_for_running_free_callbacks();
}

module_init(nv_peer_mem_init);
module_exit(nv_peer_mem_exit);
