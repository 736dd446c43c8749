// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * NVIDIA P2P test double: the nvidia_p2p_* exports of nvidia.ko, as declared
 * by the nv-p2p.h it is built against (NVIDIA 535's, or 580's for a
 * 580-style driver; both advertise NVIDIA_P2P_CAP_GET_PAGES_PERSISTENT_API),
 * over a simulated GPU virtual address space of 64 KiB pages.
 *
 * The driver generation is the header's (test-vm --nvidia): 580's nv-p2p.h
 * (NVIDIA_P2P_PAGE_TABLE_VERSION 0x00020000) makes page tables of that
 * version with the appended `flags` (NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE
 * on demand, as 580's nv_p2p_get_pages sets it for CPU-cacheable memory of
 * coherent platforms), and get_pages_persistent accepts
 * NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING (580 nv-p2p.c: force_pcie). Everything
 * else below is the same in 580's nv-p2p.c (docs/contracts.md, "NVIDIA 580
 * and 595").
 *
 * Semantics follow the documented header and the open driver's nv-p2p.c
 * (535.261.03):
 *   - get_pages needs a 64 KiB aligned range inside GPU memory and a free
 *     callback; get_pages_persistent has none and needs flags == 0;
 *   - cudaFree runs under the API lock that put_pages takes, so put_pages
 *     waits for its callbacks; of a table a cudaFree has freed it returns
 *     0: the driver looks it up and does not dereference it;
 *   - a failed put_pages leaves the table pinned and its callback due, a
 *     failed get_pages a dead table in the caller's slot (a tombstone here);
 *   - dma_unmap_pages dereferences the page table (so an unknown table there
 *     is a use-after-free in the real driver) but tolerates a mapping that
 *     is already unlinked;
 *   - free_page_table / free_dma_mapping are no-ops in 535 (the driver frees
 *     both after the free callback returns); they did free in drivers before
 *     R470, so the double insists they are called exactly once, from the free
 *     callback, on objects it still knows;
 *   - dma_map_pages on a 4 KiB table is a BUG_ON in the real driver;
 *   - calling put_pages or dma_unmap_pages from inside the free callback is
 *     forbidden by NVIDIA's GPUDirect RDMA documentation.
 * Whatever the real driver would WARN, BUG or corrupt memory on is counted as
 * a contract error instead, with the first one kept as text, so scenarios
 * fail with a reason instead of crashing the guest.
 *
 * Every object the double allocates is counted while alive, and every
 * pointer it receives is looked up in its own registry before use, so leaks
 * and double frees are visible and never dereferenced.
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/mutex.h>
#include <linux/list.h>
#include <linux/sched.h>
#include <linux/atomic.h>
#include <linux/string.h>
#include "nv-p2p.h"
#include "nvpm_doubles.h"

#ifndef NVIDIA_P2P_CAP_GET_PAGES_PERSISTENT_API
#error "nv_p2p_double must be built against a driver header with the persistent API (NVIDIA 535's nvidia/nv-p2p.h)"
#endif

MODULE_LICENSE("Dual BSD/GPL");
MODULE_DESCRIPTION("Test double of NVIDIA's P2P API (nvidia_p2p_*), for nv_peer_mem VM tests");

/* The flags get_pages_persistent documents: none before 580, FORCE_BAR1 from
 * 580 (nv-p2p.h). 580's nv-p2p.c pins such a table as any other and then
 * refuses nvidia_p2p_dma_map_pages on it with -ENOTSUPP (the mapping is for
 * the CPU's BAR1 path of coherent platforms, not for a peer): so does the
 * double. 580 ignores the flag bits it does not know; the double counts them
 * as a contract error instead, as nv-p2p.h documents none. */
#ifdef NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING
#define NVD_PERSISTENT_FLAGS NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING
#else
#define NVD_PERSISTENT_FLAGS 0u
#endif

#define NVD_VA_BASE	0x00007f0000000000ULL	/* where fresh allocations go */
#define NVD_VA_STRIDE	0x0000000100000000ULL	/* 4 GiB apart, so ranges never touch */
#define NVD_PHYS_BASE	0x0000380000000000ULL	/* the GPU's BAR1 */
#define NVD_DMA_OFFSET	0x0000100000000000ULL	/* what the IOMMU adds for the peer */

struct nvd_alloc {
	struct list_head node;
	u64 va, size, phys;
	u32 page_size_type;
	bool freed;			/* cudaFree'd, pinned by persistent tables */
	unsigned int tables;		/* live page tables on it */
};

struct nvd_table {
	struct nvidia_p2p_page_table pt;	/* what the client sees */
	struct list_head node;			/* nvd_tables */
	struct list_head maps;
	struct nvd_alloc *alloc;
	u64 va, len;
	void (*free_callback)(void *data);
	void *data;
	bool persistent;
	bool force_bar1;	/* 580+: pinned with NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING */
	bool unlinked;			/* cudaFree took it; callback pending/running */
	bool put_while_unlinked;	/* the client gave it up meanwhile (put_pages) */
	struct task_struct *cb_task;	/* thread running its free callback */
	int free_calls;			/* free_page_table calls seen */
	struct nvidia_p2p_page *page_array;
};

struct nvd_map {
	struct nvidia_p2p_dma_mapping m;
	struct list_head node;		/* table->maps */
	struct nvd_table *t;
	int free_calls;			/* free_dma_mapping calls seen */
};

static DEFINE_MUTEX(nvd_lock);
/*
 * RM's API lock: the real driver holds it while it calls a free callback
 * (cudaFree) and takes it in get_pages, put_pages and dma_map_pages (their
 * rm_p2p_* calls); not in dma_unmap_pages, which in 535's nv-p2p.c only
 * takes the page table's mapping-list semaphore. A client that waits, inside its free callback, for
 * something another thread holds while calling one of those deadlocks
 * here as it would with the real driver. Order: nvd_api_lock, then
 * nvd_lock.
 */
static DEFINE_MUTEX(nvd_api_lock);
/* Failure injection: cudaFree of this VA from inside the nth next
 * non-persistent get_pages on it, after the table is handed out. */
static u64 nvd_free_in_get_va;
static long nvd_free_in_get_countdown;
static LIST_HEAD(nvd_allocs);
static LIST_HEAD(nvd_tables);
static u64 nvd_next_va = NVD_VA_BASE;
static u64 nvd_next_phys = NVD_PHYS_BASE;
static u32 nvd_mapping_version;
static u32 nvd_table_version;	/* 0: the header's NVIDIA_P2P_PAGE_TABLE_VERSION */
static u32 nvd_table_flags;	/* 580+: page_table->flags of new tables */
static long nvd_fail_countdown;
static int nvd_fail_err;
static u8 nvd_uuid[16] = { 0x6e, 0x76, 0x70, 0x6d, 0x2d, 0x64, 0x6f, 0x75,
			   0x62, 0x6c, 0x65, 0x2d, 0x67, 0x70, 0x75, 0x30 };
static struct nvd_stats st;	/* under nvd_lock */
/*
 * What a failed get_pages leaves in the caller's page-table slot. 535's
 * nv_p2p_get_pages sets *page_table to its new table before asking RM, and
 * its failure path frees that table without clearing the slot: the caller
 * holds a dangling pointer. The double hands out this tombstone instead of
 * freed memory (a valid 64 KiB header, so a client reads nothing odd) and
 * counts any later use of it as a contract violation.
 */
static struct nvidia_p2p_page_table nvd_failed_get_table = {
	.version = NVIDIA_P2P_PAGE_TABLE_VERSION,
	.page_size = NVIDIA_P2P_PAGE_SIZE_64KB,
};

static void nvd_error(const char *fmt, ...) __printf(1, 2);
static void nvd_error(const char *fmt, ...)
{
	va_list ap;
	char buf[160];

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	/* "contract" not "BUG"/"WARNING": the harness fails on those words and
	 * the scenario reports this one itself, with context. */
	pr_notice("nv_p2p_double: contract violation: %s\n", buf);
	if (!st.errors++)
		strscpy(st.first_error, buf, sizeof(st.first_error));
}

static bool nvd_in_any_callback(void)
{
	struct nvd_table *t;

	list_for_each_entry(t, &nvd_tables, node)
		if (t->cb_task == current)
			return true;
	return false;
}

bool nvd_in_callback(void)
{
	bool ret;

	mutex_lock(&nvd_lock);
	ret = nvd_in_any_callback();
	mutex_unlock(&nvd_lock);
	return ret;
}
EXPORT_SYMBOL_GPL(nvd_in_callback);

static int nvd_free_inner(u64 va, bool api_held);

/* Takes the API lock for an entry point; false (not taken) when called
 * from inside a free callback on this thread, which the real driver does
 * not allow (it would deadlock on its own lock): counted as an error. */
static bool nvd_api_enter(const char *call)
{
	bool inside;

	mutex_lock(&nvd_lock);
	inside = nvd_in_any_callback();
	/* put_pages and dma_unmap_pages report this themselves */
	if (inside && strcmp(call, "put_pages") && strcmp(call, "dma_unmap_pages") &&
	    strcmp(call, "put_pages_persistent"))
		nvd_error("%s called from inside a free callback (the driver holds its lock there)", call);
	mutex_unlock(&nvd_lock);
	if (inside)
		return false;
	mutex_lock(&nvd_api_lock);
	return true;
}

static void nvd_api_exit(bool held)
{
	if (held)
		mutex_unlock(&nvd_api_lock);
}

/* Failure injection; called with nvd_lock held. True when this call fails. */
static bool nvd_should_fail(const char *call)
{
	if (nvd_fail_countdown <= 0 || --nvd_fail_countdown)
		return false;
	st.injected = 1;
	strscpy(st.injected_call, call, sizeof(st.injected_call));
	pr_info("nv_p2p_double: injecting %d into %s\n", nvd_fail_err, call);
	return true;
}

static struct nvd_alloc *nvd_find_alloc(u64 va, u64 len)
{
	struct nvd_alloc *a;

	list_for_each_entry(a, &nvd_allocs, node)
		if (!a->freed && va >= a->va && len <= a->size &&
		    va - a->va <= a->size - len)
			return a;
	return NULL;
}

static struct nvd_table *nvd_find_table(struct nvidia_p2p_page_table *pt)
{
	struct nvd_table *t;

	if (pt == &nvd_failed_get_table) {
		nvd_error("a client used the page table a failed get_pages had freed (stale pointer kept)");
		return NULL;
	}
	list_for_each_entry(t, &nvd_tables, node)
		if (&t->pt == pt)
			return t;
	return NULL;
}

static struct nvd_map *nvd_find_map(struct nvidia_p2p_dma_mapping *m)
{
	struct nvd_table *t;
	struct nvd_map *map;

	list_for_each_entry(t, &nvd_tables, node)
		list_for_each_entry(map, &t->maps, node)
			if (&map->m == m)
				return map;
	return NULL;
}

static u64 nvd_page_bytes(u32 type)
{
	switch (type) {
	case NVIDIA_P2P_PAGE_SIZE_4KB: return 0x1000;
	case NVIDIA_P2P_PAGE_SIZE_128KB: return 0x20000;
	default: return 0x10000;
	}
}

static void nvd_free_alloc_if_done(struct nvd_alloc *a)
{
	if (a->freed && !a->tables) {
		list_del(&a->node);
		kfree(a);
		st.allocs_live--;
	}
}

static void nvd_free_map(struct nvd_map *map)
{
	list_del(&map->node);
	kfree(map->m.dma_addresses);
	kfree(map);
	st.maps_live--;
}

static void nvd_free_table(struct nvd_table *t)
{
	struct nvd_map *map, *tmp;

	list_for_each_entry_safe(map, tmp, &t->maps, node)
		nvd_free_map(map);
	list_del(&t->node);
	t->alloc->tables--;	/* the caller frees the allocation if done */
	kfree(t->pt.pages);
	kfree(t->page_array);
	kfree(t);
	st.tables_live--;
}

static int nvd_get(u64 va, u64 len, struct nvidia_p2p_page_table **page_table,
		   void (*cb)(void *), void *data, bool persistent)
{
	struct nvd_alloc *a;
	struct nvd_table *t;
	u64 psz, i, n;

	if (!page_table)
		return -EINVAL;
	if ((va | len) & (NVD_GPU_PAGE_SIZE - 1) || !len) {
		nvd_error("get_pages%s(va=%#llx, len=%#llx): not 64 KiB aligned",
			  persistent ? "_persistent" : "", va, len);
		return -EINVAL;
	}
	a = nvd_find_alloc(va, len);
	if (!a)
		return -EINVAL;	/* not GPU memory: the client's "not mine" */
	psz = nvd_page_bytes(a->page_size_type);
	n = DIV_ROUND_UP(len, psz);
	t = kzalloc(sizeof(*t), GFP_KERNEL);
	if (!t)
		return -ENOMEM;
	t->page_array = kcalloc(n, sizeof(*t->page_array), GFP_KERNEL);
	t->pt.pages = kcalloc(n, sizeof(*t->pt.pages), GFP_KERNEL);
	if (!t->page_array || !t->pt.pages) {
		kfree(t->page_array);
		kfree(t->pt.pages);
		kfree(t);
		return -ENOMEM;
	}
	for (i = 0; i < n; i++) {
		t->page_array[i].physical_address = a->phys + (va - a->va) + i * psz;
		t->pt.pages[i] = &t->page_array[i];
	}
	t->pt.version = nvd_table_version ?: NVIDIA_P2P_PAGE_TABLE_VERSION;
#ifdef NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE
	t->pt.flags = nvd_table_flags;
#endif
	t->pt.page_size = a->page_size_type;
	t->pt.entries = n;
	t->pt.gpu_uuid = nvd_uuid;
	INIT_LIST_HEAD(&t->maps);
	t->alloc = a;
	t->va = va;
	t->len = len;
	t->free_callback = cb;
	t->data = data;
	t->persistent = persistent;
	a->tables++;
	list_add_tail(&t->node, &nvd_tables);
	st.tables_live++;
	*page_table = &t->pt;
	return 0;
}

int nvidia_p2p_get_pages(uint64_t p2p_token, uint32_t va_space,
			 uint64_t virtual_address, uint64_t length,
			 struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data)
{
	bool api_held, fire = false;
	int ret;

	api_held = nvd_api_enter("get_pages");
	mutex_lock(&nvd_lock);
	st.get_pages++;
	st.last_get_va = virtual_address;
	st.last_get_len = length;
	if (nvd_should_fail("get_pages")) {
		ret = nvd_fail_err;
		if (page_table)
			*page_table = &nvd_failed_get_table;
	} else if (!free_callback) {
		nvd_error("get_pages without a free callback");	/* -EINVAL in nv-p2p.c */
		ret = -EINVAL;
	} else {
		/* nv-p2p.h documents @data as "A non-NULL opaque pointer"; 535's
		 * nv-p2p.c does not check it. Accept, as 535 does, and count it
		 * for the acquire scenario to report. */
		if (!data)
			st.null_data++;
		ret = nvd_get(virtual_address, length, page_table,
			      free_callback, data, false);
		if (!ret && nvd_free_in_get_countdown > 0 &&
		    nvd_free_in_get_va == virtual_address && !--nvd_free_in_get_countdown)
			fire = true;
	}
	mutex_unlock(&nvd_lock);
	if (fire)
		nvd_free_inner(virtual_address, true);
	nvd_api_exit(api_held);
	return ret;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_get_pages);

int nvidia_p2p_get_pages_persistent(uint64_t virtual_address, uint64_t length,
				    struct nvidia_p2p_page_table **page_table,
				    uint32_t flags)
{
	bool api_held;
	int ret;

	api_held = nvd_api_enter("get_pages_persistent");
	mutex_lock(&nvd_lock);
	st.get_pages_persistent++;
	st.last_get_va = virtual_address;
	st.last_get_len = length;
	if (nvd_should_fail("get_pages_persistent")) {
		ret = nvd_fail_err;
		if (page_table)
			*page_table = &nvd_failed_get_table;
	} else if (flags & ~NVD_PERSISTENT_FLAGS) {
		nvd_error("get_pages_persistent with flags %#x (nv-p2p.h documents %#x)",
			  flags, NVD_PERSISTENT_FLAGS);
		ret = -EINVAL;
	} else {
		ret = nvd_get(virtual_address, length, page_table, NULL, NULL, true);
		if (!ret && flags)
			container_of(*page_table, struct nvd_table, pt)->force_bar1 = true;
	}
	mutex_unlock(&nvd_lock);
	nvd_api_exit(api_held);
	return ret;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_get_pages_persistent);

static int nvd_put(const char *call, u64 va, struct nvidia_p2p_page_table *pt,
		   bool persistent)
{
	struct nvd_table *t;
	struct nvd_alloc *a;
	bool fail = nvd_should_fail(call);

	if (!pt)
		return 0;	/* the driver returns 0 for NULL */
	if (nvd_in_any_callback()) {
		nvd_error("%s called from inside a free callback (forbidden by NVIDIA's GPUDirect RDMA docs)", call);
		return -EINVAL;
	}
	t = nvd_find_table(pt);
	/* 535's nvidia_p2p_put_pages fails -ENOMEM (nv_kmem_cache_alloc_stack)
	 * before reaching RM: the table stays pinned, its free callback due. */
	if (fail && !persistent && t && !t->unlinked)
		return nvd_fail_err;
	if (!t || (t->unlinked && !persistent)) {
		if (persistent) {
			/* no callback can free a persistent table: the client
			 * lost track of it (a double put) */
			nvd_error("%s of an unknown page table %px (double put?)", call, pt);
			return -EINVAL;
		}
		st.stale_puts++;	/* NV_ERR_OBJECT_NOT_FOUND -> 0 */
		if (t)
			t->put_while_unlinked = true;
		return fail ? nvd_fail_err : 0;
	}
	if (t->persistent != persistent) {
		nvd_error("%s on a %s page table", call,
			  t->persistent ? "persistent" : "non-persistent");
		return -EINVAL;
	}
	if (t->va != va) {
		nvd_error("%s(va=%#llx) of a table obtained for va=%#llx", call, va, t->va);
		return -EINVAL;
	}
	if (!list_empty(&t->maps)) {
		nvd_error("%s while a dma mapping of the table is still mapped (dma_unmap missing)", call);
		/* freed with the table below, as 535 does: counted, so the
		 * closing leak check sees it too */
		st.maps_dropped++;
	}
	a = t->alloc;
	nvd_free_table(t);
	nvd_free_alloc_if_done(a);
	return fail ? nvd_fail_err : 0;
}

int nvidia_p2p_put_pages(uint64_t p2p_token, uint32_t va_space,
			 uint64_t virtual_address,
			 struct nvidia_p2p_page_table *page_table)
{
	bool api_held;
	int ret;

	api_held = nvd_api_enter("put_pages");
	mutex_lock(&nvd_lock);
	st.put_pages++;
	ret = nvd_put("put_pages", virtual_address, page_table, false);
	mutex_unlock(&nvd_lock);
	nvd_api_exit(api_held);
	return ret;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_put_pages);

int nvidia_p2p_put_pages_persistent(uint64_t virtual_address,
				    struct nvidia_p2p_page_table *page_table,
				    uint32_t flags)
{
	bool api_held;
	int ret;

	api_held = nvd_api_enter("put_pages_persistent");
	mutex_lock(&nvd_lock);
	st.put_pages_persistent++;
	if (flags) {
		nvd_error("put_pages_persistent with flags %#x (must be 0)", flags);
		ret = -EINVAL;
	} else {
		ret = nvd_put("put_pages_persistent", virtual_address, page_table, true);
	}
	mutex_unlock(&nvd_lock);
	nvd_api_exit(api_held);
	return ret;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_put_pages_persistent);

int nvidia_p2p_dma_map_pages(struct pci_dev *peer,
			     struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping)
{
	bool api_held;
	struct nvd_table *t;
	struct nvd_map *map;
	u64 psz;
	u32 i;
	int ret = 0;

	api_held = nvd_api_enter("dma_map_pages");
	mutex_lock(&nvd_lock);
	st.dma_map++;
	st.last_peer = peer;
	if (nvd_should_fail("dma_map_pages")) {
		ret = nvd_fail_err;
		goto out;
	}
	if (!peer || !page_table || !dma_mapping) {
		nvd_error("dma_map_pages with a NULL argument");
		ret = -EINVAL;
		goto out;
	}
	t = nvd_find_table(page_table);
	if (!t) {
		nvd_error("dma_map_pages of an unknown page table %px (use after free)", page_table);
		ret = -EINVAL;
		goto out;
	}
	if (t->pt.page_size == NVIDIA_P2P_PAGE_SIZE_4KB) {
		/* BUG_ON(page_size_type <= NVIDIA_P2P_PAGE_SIZE_4KB) in nv-p2p.c */
		nvd_error("dma_map_pages of a 4 KiB page table (a BUG_ON in nvidia.ko)");
		ret = -EINVAL;
		goto out;
	}
	if (t->force_bar1) {
		ret = -ENOTSUPP;	/* 580 nv-p2p.c: no peer mapping of a BAR1-forced table */
		goto out;
	}
	if (t->unlinked) {
		ret = -EINVAL;	/* being freed: RM no longer knows the pages */
		goto out;
	}
	map = kzalloc(sizeof(*map), GFP_KERNEL);
	if (map)
		map->m.dma_addresses = kcalloc(t->pt.entries, sizeof(u64), GFP_KERNEL);
	if (!map || !map->m.dma_addresses) {
		kfree(map);
		ret = -ENOMEM;
		goto out;
	}
	psz = nvd_page_bytes(t->pt.page_size);
	for (i = 0; i < t->pt.entries; i++)
		map->m.dma_addresses[i] = t->pt.pages[i]->physical_address + NVD_DMA_OFFSET;
	map->m.version = nvd_mapping_version ?: NVIDIA_P2P_DMA_MAPPING_VERSION;
	map->m.page_size_type = t->pt.page_size;
	map->m.entries = t->pt.entries;
	map->m.private = t;
	map->m.pci_dev = peer;
	map->t = t;
	list_add_tail(&map->node, &t->maps);
	st.maps_live++;
	*dma_mapping = &map->m;
out:
	mutex_unlock(&nvd_lock);
	nvd_api_exit(api_held);
	return ret;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_dma_map_pages);

int nvidia_p2p_dma_unmap_pages(struct pci_dev *peer,
			       struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping)
{
	struct nvd_table *t;
	struct nvd_map *map;
	bool fail;
	int ret = 0;

	mutex_lock(&nvd_lock);
	st.dma_unmap++;
	fail = nvd_should_fail("dma_unmap_pages");
	if (!peer || !page_table || !dma_mapping) {
		nvd_error("dma_unmap_pages with a NULL argument");
		ret = -EINVAL;
		goto out;
	}
	if (nvd_in_any_callback()) {
		nvd_error("dma_unmap_pages called from inside a free callback (forbidden by NVIDIA's GPUDirect RDMA docs)");
		ret = -EINVAL;
		goto out;
	}
	t = nvd_find_table(page_table);
	if (!t) {
		/* nv-p2p.c does container_of(page_table) and takes its lock */
		nvd_error("dma_unmap_pages with an unknown page table %px (use after free in nvidia.ko)", page_table);
		ret = -EINVAL;
		goto out;
	}
	map = nvd_find_map(dma_mapping);
	if (!map || map->t != t) {
		/* already unlinked (teardown raced with it): the driver returns 0 */
		ret = fail ? nvd_fail_err : 0;
		goto out;
	}
	if (map->m.pci_dev != peer)
		nvd_error("dma_unmap_pages by a different peer than dma_map_pages (WARN_ON in nvidia.ko)");
	nvd_free_map(map);
	ret = fail ? nvd_fail_err : 0;
out:
	mutex_unlock(&nvd_lock);
	return ret;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_dma_unmap_pages);

int nvidia_p2p_free_page_table(struct nvidia_p2p_page_table *page_table)
{
	struct nvd_table *t;

	mutex_lock(&nvd_lock);
	st.free_page_table++;
	t = nvd_find_table(page_table);
	if (!t)
		st.stale_frees++;
	else if (!t->unlinked)
		nvd_error("free_page_table of a live table (only valid in its free callback; put_pages releases live tables)");
	else if (++t->free_calls > 1)
		nvd_error("free_page_table called %d times for one table (double free)", t->free_calls);
	mutex_unlock(&nvd_lock);
	return 0;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_free_page_table);

int nvidia_p2p_free_dma_mapping(struct nvidia_p2p_dma_mapping *dma_mapping)
{
	struct nvd_map *map;

	mutex_lock(&nvd_lock);
	st.free_dma_mapping++;
	map = nvd_find_map(dma_mapping);
	if (!map)
		st.stale_frees++;
	else if (!map->t->unlinked)
		nvd_error("free_dma_mapping of a live mapping (only valid in the free callback; dma_unmap_pages releases live mappings)");
	else if (++map->free_calls > 1)
		nvd_error("free_dma_mapping called %d times for one mapping (double free)", map->free_calls);
	mutex_unlock(&nvd_lock);
	return 0;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_free_dma_mapping);

/* ------------------------------------------------------------- test hooks */

u64 nvd_alloc(u64 va, u64 size, u32 page_size_type)
{
	struct nvd_alloc *a;

	if (!size || (size | va) & (NVD_GPU_PAGE_SIZE - 1) ||
	    page_size_type >= NVIDIA_P2P_PAGE_SIZE_COUNT ||
	    (va && va + size - 1 < va))
		return 0;
	a = kzalloc(sizeof(*a), GFP_KERNEL);
	if (!a)
		return 0;
	mutex_lock(&nvd_lock);
	if (!va) {
		va = nvd_next_va;
		nvd_next_va += max_t(u64, NVD_VA_STRIDE, round_up(size, NVD_VA_STRIDE));
	}
	a->va = va;
	a->size = size;
	a->phys = nvd_next_phys;
	nvd_next_phys += round_up(size, NVD_VA_STRIDE);
	a->page_size_type = page_size_type;
	list_add_tail(&a->node, &nvd_allocs);
	st.allocs_live++;
	mutex_unlock(&nvd_lock);
	return va;
}
EXPORT_SYMBOL_GPL(nvd_alloc);

int nvd_free(u64 va)
{
	return nvd_free_inner(va, false);
}
EXPORT_SYMBOL_GPL(nvd_free);

void nvd_free_during_get_pages(u64 va, long nth)
{
	mutex_lock(&nvd_lock);
	nvd_free_in_get_va = va;
	nvd_free_in_get_countdown = nth;
	mutex_unlock(&nvd_lock);
}
EXPORT_SYMBOL_GPL(nvd_free_during_get_pages);

/*
 * cudaFree. @api_held: the caller (an injected free inside get_pages) holds
 * the API lock already, as the driver would in that case.
 *
 * The whole free runs under the API lock, as RM's memory free does
 * (CliDelThirdPartyP2PVidmemInfo, under the lock every rm_p2p_* entry point
 * takes): for each table, the client's free callback, then the table and
 * its mappings freed (nv-p2p.c's nv_p2p_mem_info_free_callback) and the
 * table unlinked. So a put_pages on another thread waits for the callbacks
 * and then finds the table gone (0): once nvidia_p2p_put_pages has
 * returned, no free callback for that table is running or will come.
 */
static int nvd_free_inner(u64 va, bool api_held)
{
	struct nvd_alloc *a, *found = NULL;
	struct nvd_table *t;
	struct nvd_map *map;
	int calls = 0;

	if (!api_held)
		mutex_lock(&nvd_api_lock);
	mutex_lock(&nvd_lock);
	list_for_each_entry(a, &nvd_allocs, node)
		if (a->va == va && !a->freed)
			found = a;
	if (!found) {
		mutex_unlock(&nvd_lock);
		if (!api_held)
			mutex_unlock(&nvd_api_lock);
		return -EINVAL;
	}
	found->freed = true;
	found->tables++;	/* pinned until we are done with it */
	/* Marked now; nobody else can look before the free is over (the API
	 * lock), but the client's own calls from inside a callback can. */
	list_for_each_entry(t, &nvd_tables, node)
		if (t->alloc == found && !t->persistent)
			t->unlinked = true;

	/* One callback at a time; the callback calls back into
	 * free_page_table / free_dma_mapping. */
	for (;;) {
		struct nvd_table *next = NULL;

		list_for_each_entry(t, &nvd_tables, node)
			if (t->alloc == found && t->unlinked && !t->cb_task) {
				next = t;
				break;
			}
		if (!next)
			break;
		next->cb_task = current;
		st.callbacks++;
		mutex_unlock(&nvd_lock);

		next->free_callback(next->data);
		calls++;

		mutex_lock(&nvd_lock);
		next->cb_task = NULL;
		/* 535's nv_p2p_free_platform_data: the driver frees the table and
		 * its mappings now. Pre-R470 drivers freed them when the client
		 * called free_page_table/free_dma_mapping, exactly once each. */
		/* A client whose put_pages already gave the table up (its
		 * teardown raced with this cudaFree) may skip the frees. */
		if (next->free_calls > 1 || (!next->free_calls && !next->put_while_unlinked))
			nvd_error("free callback called free_page_table %d times (want 1)", next->free_calls);
		list_for_each_entry(map, &next->maps, node)
			if (map->free_calls > 1 || (!map->free_calls && !next->put_while_unlinked))
				nvd_error("free callback called free_dma_mapping %d times on a live mapping (want 1)",
					  map->free_calls);
		nvd_free_table(next);
	}

	found->tables--;	/* persistent tables may still pin it */
	nvd_free_alloc_if_done(found);
	mutex_unlock(&nvd_lock);
	if (!api_held)
		mutex_unlock(&nvd_api_lock);
	return calls;
}

u64 nvd_dma_address(u64 va)
{
	struct nvd_alloc *a;
	u64 ret = 0;

	mutex_lock(&nvd_lock);
	list_for_each_entry(a, &nvd_allocs, node)
		if (va >= a->va && va - a->va < a->size)
			ret = a->phys + (va - a->va) + NVD_DMA_OFFSET;
	mutex_unlock(&nvd_lock);
	return ret;
}
EXPORT_SYMBOL_GPL(nvd_dma_address);

void nvd_set_mapping_version(u32 version)
{
	mutex_lock(&nvd_lock);
	nvd_mapping_version = version;
	mutex_unlock(&nvd_lock);
}
EXPORT_SYMBOL_GPL(nvd_set_mapping_version);

void nvd_set_page_table_version(u32 version)
{
	mutex_lock(&nvd_lock);
	nvd_table_version = version;
	mutex_unlock(&nvd_lock);
}
EXPORT_SYMBOL_GPL(nvd_set_page_table_version);

u32 nvd_header_page_table_version(void)
{
	return NVIDIA_P2P_PAGE_TABLE_VERSION;
}
EXPORT_SYMBOL_GPL(nvd_header_page_table_version);

bool nvd_set_page_table_flags(u32 flags)
{
#ifdef NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE
	mutex_lock(&nvd_lock);
	nvd_table_flags = flags;
	mutex_unlock(&nvd_lock);
	return true;
#else
	return false;
#endif
}
EXPORT_SYMBOL_GPL(nvd_set_page_table_flags);

void nvd_fail_nth(long nth, int err)
{
	mutex_lock(&nvd_lock);
	nvd_fail_countdown = nth;
	nvd_fail_err = err;
	st.injected = 0;
	st.injected_call[0] = 0;
	mutex_unlock(&nvd_lock);
}
EXPORT_SYMBOL_GPL(nvd_fail_nth);

long nvd_reset_errors(void)
{
	long n;

	mutex_lock(&nvd_lock);
	n = st.errors;
	st.errors = 0;
	st.first_error[0] = 0;
	mutex_unlock(&nvd_lock);
	return n;
}
EXPORT_SYMBOL_GPL(nvd_reset_errors);

void nvd_get_stats(struct nvd_stats *out)
{
	mutex_lock(&nvd_lock);
	*out = st;
	mutex_unlock(&nvd_lock);
}
EXPORT_SYMBOL_GPL(nvd_get_stats);

static int __init nvd_init(void)
{
	pr_info("nv_p2p_double: simulated GPU with %llu KiB pages, persistent API\n",
		NVD_GPU_PAGE_SIZE >> 10);
	return 0;
}

static void __exit nvd_exit(void)
{
	struct nvd_alloc *a, *atmp;
	struct nvd_table *t, *ttmp;

	/* Anything left is a leak of the client (or of a scenario). */
	if (st.tables_live || st.maps_live)
		pr_err("nv_p2p_double: unloading with %ld page tables and %ld dma mappings alive (leak)\n",
		       st.tables_live, st.maps_live);
	list_for_each_entry_safe(t, ttmp, &nvd_tables, node)
		nvd_free_table(t);
	list_for_each_entry_safe(a, atmp, &nvd_allocs, node) {
		list_del(&a->node);
		kfree(a);
	}
	pr_info("nv_p2p_double: unloaded, %ld contract violations\n", st.errors);
}

module_init(nvd_init);
module_exit(nvd_exit);
