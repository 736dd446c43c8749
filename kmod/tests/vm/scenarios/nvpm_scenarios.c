// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * Scenario driver for the nv_peer_mem VM tests. It plays the CUDA
 * application and the HCA driver against nv_peer_mem.ko through the two test
 * doubles, and checks what nv_peer_mem did through their counters.
 *
 * Control: debugfs. The guest's init script writes a command to
 * /sys/kernel/debug/nvpm/ctl; the write fails (EIO) when the scenario fails,
 * and /sys/kernel/debug/nvpm/result then reads "PASS <detail>" or
 * "FAIL <reason>". Commands:
 *   run <scenario>     see scenarios[] below
 *   hold <n> / drop    keep n registrations alive / release them (rmmod test)
 *   snapshot           remember the core's registration counters
 *   cycles <n>         check n load/unload cycles since the snapshot
 *   fail_register <n>  snapshot, and make the core's nth next registration fail
 *   rollback           check a load whose 2nd registration failed left nothing
 *   squat / unsquat    make / remove a /sys/kernel/mm/memory_peers of another
 *                      module's (a link to /sys/module/nvpm_scenarios), as a
 *                      peer client that makes its own would: nv_peer_mem
 *                      must then load, make nothing and say why
 *
 * Every scenario starts by refusing contract violations recorded before it
 * (they happened in a shell step, e.g. insmod/rmmod) and ends by checking
 * that the doubles are back to where they started: no page table, mapping,
 * GPU allocation or registration leaked, no contract violation.
 */
#include <linux/module.h>
#include <linux/debugfs.h>
#include <linux/uaccess.h>
#include <linux/slab.h>
#include <linux/pci.h>
#include <linux/kthread.h>
#include <linux/delay.h>
#include <linux/random.h>
#include <linux/ktime.h>
#include <linux/completion.h>
#include <linux/kobject.h>
#include <linux/sysfs.h>
#include <linux/scatterlist.h>
#include <rdma/peer_mem.h>
#include "nv-p2p.h"
#include "nvpm_doubles.h"

MODULE_LICENSE("Dual BSD/GPL");
MODULE_DESCRIPTION("Scenario driver for nv_peer_mem VM tests");

/*
 * The race's and the benchmark's loops run their counts divided by this
 * (the guest's init passes nvpm.iter_divisor= from the kernel command line;
 * test-vm sets it to 10 for arm64 under TCG, xtask/src/vm/arch.rs). The
 * scenarios and their checks are the same; only the rounds are fewer.
 */
static int iter_divisor = 1;
module_param(iter_divisor, int, 0444);
MODULE_PARM_DESC(iter_divisor, "divide the race's and the benchmark's iteration counts by this (>= 1)");

#define SZ64K 0x10000UL
#define NV "nv_mem"
#define NC "nv_mem_nc"
#define INJ_ERR (-EIO)

static char result[768];
static DEFINE_MUTEX(ctl_lock);

#define FAIL(fmt, ...) do {						\
	snprintf(result, sizeof(result), "FAIL " fmt, ##__VA_ARGS__);	\
	return -EIO;							\
} while (0)
#define CHECK(cond, fmt, ...) do {					\
	if (!(cond))							\
		FAIL(fmt " [line %d]", ##__VA_ARGS__, __LINE__);	\
} while (0)
#define TRY(expr) do { int __r = (expr); if (__r) return __r; } while (0)

/* ------------------------------------------------------------ baselines */

struct base {
	struct nvd_stats n;
	struct pcd_stats c;
};

static int begin(struct base *b)
{
	long ne = nvd_reset_errors(), ce = pcd_reset_errors();

	nvd_get_stats(&b->n);
	pcd_get_stats(&b->c);
	if (ne || ce)
		FAIL("contract violations before this scenario (during a shell step): nvidia %ld, core %ld; see the console log",
		     ne, ce);
	return 0;
}

static int errors_since(const char *when)
{
	struct nvd_stats n;
	struct pcd_stats c;

	nvd_get_stats(&n);
	pcd_get_stats(&c);
	/* reported here: reset, so the next scenario does not report them too */
	if (n.errors || c.errors) {
		nvd_reset_errors();
		pcd_reset_errors();
	}
	if (n.errors)
		FAIL("%s: %ld NVIDIA API contract violation(s), first: %s", when, n.errors, n.first_error);
	if (c.errors)
		FAIL("%s: %ld PeerDirect contract violation(s), first: %s", when, c.errors, c.first_error);
	return 0;
}

/* Everything allocated since @b is gone again, and nobody broke a contract. */
static int clean(const struct base *b, const char *when)
{
	struct nvd_stats n;
	struct pcd_stats c;

	TRY(errors_since(when));
	nvd_get_stats(&n);
	pcd_get_stats(&c);
	CHECK(n.tables_live == b->n.tables_live, "%s: %ld page table(s) leaked (put_pages missing)",
	      when, n.tables_live - b->n.tables_live);
	CHECK(n.maps_live == b->n.maps_live, "%s: %ld dma mapping(s) leaked (dma_unmap missing)",
	      when, n.maps_live - b->n.maps_live);
	CHECK(n.allocs_live == b->n.allocs_live, "%s: %ld GPU allocation(s) still pinned",
	      when, n.allocs_live - b->n.allocs_live);
	CHECK(c.umems_live == b->c.umems_live, "%s: %ld registration(s) leaked",
	      when, c.umems_live - b->c.umems_live);
	return 0;
}

static u64 gpu_alloc(u64 size, u32 type)
{
	return nvd_alloc(0, size, type);
}

/* The sg table as the HCA sees it: one entry per 64 KiB page with the bus
 * addresses of the NVIDIA mapping, except that MLNX_OFED's core
 * (fix_peer_sgls) moves the first entry's start up to the registration's
 * first 4 KiB page and trims the last entry after its last 4 KiB page. */
static int check_sg(struct pcd_umem *u, u64 start, int pages)
{
	u64 head = ALIGN_DOWN((u64)u->addr, PAGE_SIZE) - ALIGN_DOWN((u64)u->addr, SZ64K);
	u64 tail = ALIGN((u64)u->addr + u->size, SZ64K) - ALIGN((u64)u->addr + u->size, PAGE_SIZE);
	struct scatterlist *sg;
	int i;

	CHECK(u->nmap == pages, "dma_map returned nmap %d, want %d (64 KiB pages of the widened range)",
	      u->nmap, pages);
	CHECK(u->sgt.sgl && u->sgt.nents >= pages, "sg table has %u entries, want %d", u->sgt.nents, pages);
	for_each_sg(u->sgt.sgl, sg, u->nmap, i) {
		u64 want = nvd_dma_address(start + i * SZ64K) + (i == 0 ? head : 0);
		u64 len = SZ64K - (i == 0 ? head : 0) - (i == pages - 1 ? tail : 0);

		CHECK(sg_dma_address(sg) == want, "sg[%d] dma address %#llx, want %#llx", i,
		      (u64)sg_dma_address(sg), want);
		CHECK(sg_dma_len(sg) == len, "sg[%d] dma length %#x, want %#llx", i, sg_dma_len(sg), len);
	}
	return 0;
}

/* ------------------------------------------------------ registration */

static struct pcd_client_info clients[8];

static int expect_clients(bool legacy, bool nc)
{
	int n = pcd_clients(clients, ARRAY_SIZE(clients));
	struct pcd_client_info *c = &clients[0];

	CHECK(n == (nc ? 2 : 1), "%d clients registered, want %d (%s)", n, nc ? 2 : 1,
	      nc ? "nv_mem, nv_mem_nc" : "nv_mem only");
	CHECK(!strcmp(c->name, NV), "first client is \"%s\", want nv_mem", c->name);
	CHECK(strnlen(c->version, IB_PEER_MEMORY_VER_MAX - 1) < IB_PEER_MEMORY_VER_MAX - 1,
	      "nv_mem version string runs into the new-style flag byte");
	CHECK(c->invalidation && c->slot_filled, "nv_mem registered without an invalidate callback pointer");
	if (legacy) {
		CHECK(!c->new_style && c->ex_size == 0 && c->flags == 0,
		      "legacy nv_mem: version[15]=%d ex_size=%zu flags=%#x, want 0/0/0",
		      c->version[IB_PEER_MEMORY_VER_MAX - 1], c->ex_size, c->flags);
	} else {
		CHECK(c->new_style, "nv_mem is not new-style (version[15]=%d, want 1)",
		      c->version[IB_PEER_MEMORY_VER_MAX - 1]);
		CHECK(c->ex_size == sizeof(struct peer_memory_client_ex),
		      "nv_mem ex_size %zu, want %zu", c->ex_size, sizeof(struct peer_memory_client_ex));
		CHECK(c->flags == PEER_MEM_INVALIDATE_UNMAPS, "nv_mem flags %#x, want PEER_MEM_INVALIDATE_UNMAPS",
		      c->flags);
	}
	if (nc) {
		c = &clients[1];
		CHECK(!strcmp(c->name, NC), "second client is \"%s\", want nv_mem_nc", c->name);
		CHECK(!c->invalidation, "nv_mem_nc passed an invalidate callback pointer (want NULL)");
	}
	return 0;
}

static int sc_register(void)
{
	TRY(expect_clients(false, true));
	snprintf(result, sizeof(result), "PASS nv_mem (new-style, PEER_MEM_INVALIDATE_UNMAPS, invalidation) and nv_mem_nc (no invalidation)");
	return 0;
}

static int sc_register_no_nc(void)
{
	TRY(expect_clients(false, false));
	snprintf(result, sizeof(result), "PASS only nv_mem registered");
	return 0;
}

/* persistent_api_support=1 (default): the persistent client alone, named
 * nv_mem, a plain client without an invalidate callback (nvidia-peermem.c
 * >= 560.28.03, nv_mem_nc_client_init). */
static int sc_register_persistent(void)
{
	int n = pcd_clients(clients, ARRAY_SIZE(clients));
	struct pcd_client_info *c = &clients[0];

	CHECK(n == 1, "%d clients registered, want 1 (the persistent client as nv_mem)", n);
	CHECK(!strcmp(c->name, NV), "the client is \"%s\", want nv_mem", c->name);
	CHECK(!c->invalidation, "nv_mem passed an invalidate callback pointer (want NULL: the persistent client)");
	CHECK(!c->new_style && c->ex_size == 0 && c->flags == 0,
	      "persistent nv_mem: version[15]=%d ex_size=%zu flags=%#x, want a plain client (0/0/0)",
	      c->version[IB_PEER_MEMORY_VER_MAX - 1], c->ex_size, c->flags);
	snprintf(result, sizeof(result), "PASS only the persistent client, as nv_mem (plain client, no invalidation)");
	return 0;
}

static int sc_register_none(void)
{
	struct pcd_stats c;
	int n = pcd_clients(clients, ARRAY_SIZE(clients));

	pcd_get_stats(&c);
	CHECK(n == 0, "%d client(s) still registered (first: %s)", n, clients[0].name);
	TRY(errors_since("unload"));
	snprintf(result, sizeof(result), "PASS no client registered (%ld registrations, %ld unregistrations so far)",
		 c.registrations, c.unregistrations);
	return 0;
}

/* ------------------------------------------------------------ acquire */

static int acquire_once(const char *client, unsigned long addr, size_t size,
			int want, u64 want_va, u64 want_len)
{
	struct nvd_stats s0, s1, s2;
	void *ctx = NULL;
	int ret;

	nvd_get_stats(&s0);
	ret = pcd_client_acquire(client, addr, size, &ctx);
	nvd_get_stats(&s1);
	CHECK(ret == want, "%s acquire(%#lx, %#zx) = %d, want %d", client, addr, size, ret, want);
	if (ret == 1)
		pcd_client_release(client, ctx);
	nvd_get_stats(&s2);
	if (want_len) {
		CHECK(s1.get_pages == s0.get_pages + 1, "%s acquire(%#lx, %#zx) made %ld get_pages probes, want 1",
		      client, addr, size, s1.get_pages - s0.get_pages);
		CHECK(s1.last_get_va == want_va && s1.last_get_len == want_len,
		      "%s acquire(%#lx, %#zx) probed [%#llx, +%#llx), want [%#llx, +%#llx)",
		      client, addr, size, s1.last_get_va, s1.last_get_len, want_va, want_len);
		/* a probe unpins at once, a kept pin goes with the release */
		CHECK(s2.tables_live == s0.tables_live, "%s acquire and release left a page table pinned", client);
	} else {
		CHECK(s1.get_pages == s0.get_pages && s1.get_pages_persistent == s0.get_pages_persistent,
		      "%s acquire(%#lx, %#zx): an overflowing range must be refused without asking nvidia.ko",
		      client, addr, size);
	}
	return 0;
}

static int sc_acquire(void)
{
	static const char *const names[] = { NV, NC };
	struct base b;
	u64 va, top;
	int i;

	TRY(begin(&b));
	va = gpu_alloc(16 * SZ64K, NVIDIA_P2P_PAGE_SIZE_64KB);
	/* the last MiB of the address space, for the overflow cases */
	top = nvd_alloc(0xfffffffffff00000ULL, 0x100000, NVIDIA_P2P_PAGE_SIZE_64KB);
	CHECK(va && top, "cannot allocate simulated GPU memory");
	for (i = 0; i < ARRAY_SIZE(names); i++) {
		const char *c = names[i];

		TRY(acquire_once(c, va, 4096, 1, va, SZ64K));
		TRY(acquire_once(c, va + 0x1234, SZ64K, 1, va, 2 * SZ64K));
		TRY(acquire_once(c, va + 0xffff, 1, 1, va, SZ64K));
		TRY(acquire_once(c, va + SZ64K, 3 * SZ64K, 1, va + SZ64K, 3 * SZ64K));
		TRY(acquire_once(c, va, 16 * SZ64K, 1, va, 16 * SZ64K));
		/* partly beyond the allocation, host memory: not mine */
		TRY(acquire_once(c, va + 15 * SZ64K + 1, SZ64K, 0, va + 15 * SZ64K, 2 * SZ64K));
		TRY(acquire_once(c, 0x10000, 4096, 0, 0x10000, SZ64K));
		/* GPU memory at the top of the address space is fine... */
		TRY(acquire_once(c, 0xfffffffffff10000UL, SZ64K, 1, 0xfffffffffff10000ULL, SZ64K));
		/* ...but a range whose end overflows is refused, never wrapped */
		TRY(acquire_once(c, 0xffffffffffff8000UL, SZ64K, 0, 0, 0));
		TRY(acquire_once(c, 0xfffffffffffffff0UL, 0x20, 0, 0, 0));
		TRY(acquire_once(c, va, ~0UL, 0, 0, 0));
	}
	CHECK(nvd_free(va) == 0 && nvd_free(top) == 0, "cudaFree found registrations left by acquire");
	{
		struct nvd_stats s;

		nvd_get_stats(&s);
		CHECK(s.null_data == b.n.null_data,
		      "%ld nvidia_p2p_get_pages calls passed NULL as the free callback's data (nv-p2p.h: \"A non-NULL opaque pointer\"; pass the context)",
		      s.null_data - b.n.null_data);
	}
	TRY(clean(&b, "acquire"));
	snprintf(result, sizeof(result), "PASS mine/not mine, 64 KiB widening, overflowing ranges refused (nv_mem, nv_mem_nc)");
	return 0;
}

/* ---------------------------------------------------------- lifecycle */

static int lifecycle_one(u64 va, unsigned long off, size_t size, bool inval, const char *want_client,
			 struct pcd_umem **out)
{
	struct nvd_stats s0, s1;
	struct pcd_umem *u;
	u64 start = (va + off) & ~(SZ64K - 1);
	u64 end = round_up(va + off + size, SZ64K);
	int ret;

	nvd_get_stats(&s0);
	ret = pcd_umem_get(va + off, size, inval, NULL, &u);
	CHECK(!ret, "registration of [%#llx, +%#zx) failed: %d", va + off, size, ret);
	nvd_get_stats(&s1);
	CHECK(!strcmp(pcd_umem_client_name(u), want_client), "registration claimed by %s, want %s",
	      pcd_umem_client_name(u), want_client);
	CHECK(s1.last_get_va == start && s1.last_get_len == end - start,
	      "get_pages asked nvidia.ko for [%#llx, +%#llx), want [%#llx, +%#llx)",
	      s1.last_get_va, s1.last_get_len, start, end - start);
	CHECK(s1.last_peer == to_pci_dev(pcd_dma_device()),
	      "dma_map_pages got peer %px, want the HCA's pci_dev %px", s1.last_peer,
	      to_pci_dev(pcd_dma_device()));
	CHECK(s1.tables_live == s0.tables_live + 1 && s1.maps_live == s0.maps_live + 1,
	      "a live registration holds %ld page tables and %ld mappings, want 1 and 1",
	      s1.tables_live - s0.tables_live, s1.maps_live - s0.maps_live);
	CHECK(pcd_umem_page_size(u) == SZ64K, "get_page_size = %lu, want 65536", pcd_umem_page_size(u));
	TRY(check_sg(u, start, (end - start) / SZ64K));
	*out = u;
	return 0;
}

static int release_one(struct pcd_umem *u)
{
	struct nvd_stats s0, s1;
	int ret;

	nvd_get_stats(&s0);
	pcd_umem_hold(u);
	pcd_umem_release(u);
	ret = u->dma_unmap_ret;
	pcd_umem_put(u);
	nvd_get_stats(&s1);
	CHECK(!ret, "dma_unmap returned %d", ret);
	CHECK(s1.dma_unmap == s0.dma_unmap + 1, "teardown made %ld dma_unmap_pages calls, want 1",
	      s1.dma_unmap - s0.dma_unmap);
	CHECK(s1.tables_live == s0.tables_live - 1 && s1.maps_live == s0.maps_live - 1,
	      "teardown released %ld page tables and %ld mappings, want 1 and 1",
	      s0.tables_live - s1.tables_live, s0.maps_live - s1.maps_live);
	return 0;
}

static int sc_lifecycle(void)
{
	struct base b;
	struct pcd_umem *u;
	u64 va;

	TRY(begin(&b));
	va = gpu_alloc(16 * SZ64K, NVIDIA_P2P_PAGE_SIZE_64KB);
	CHECK(va, "cannot allocate simulated GPU memory");
	TRY(lifecycle_one(va, 0x8000, 2 * SZ64K, true, NV, &u));
	TRY(release_one(u));
	TRY(lifecycle_one(va, 0, 16 * SZ64K, true, NV, &u));
	TRY(release_one(u));
	CHECK(nvd_free(va) == 0, "cudaFree after release still found a registration");
	TRY(clean(&b, "lifecycle"));
	snprintf(result, sizeof(result), "PASS acquire, get_pages, dma_map (sg = 64 KiB GPU pages), dma_unmap, put_pages, release");
	return 0;
}

#define SEVERAL 16
static int sc_several(void)
{
	struct pcd_umem *u[SEVERAL];
	struct base b;
	u64 va[4];
	int i;

	TRY(begin(&b));
	for (i = 0; i < 4; i++) {
		va[i] = gpu_alloc(8 * SZ64K, NVIDIA_P2P_PAGE_SIZE_64KB);
		CHECK(va[i], "cannot allocate simulated GPU memory");
	}
	/* overlapping and disjoint ranges, on 4 allocations, all alive */
	for (i = 0; i < SEVERAL; i++)
		TRY(lifecycle_one(va[i % 4], (i / 4) * 0x9000, SZ64K + i * 0x1000, true, NV, &u[i]));
	for (i = 1; i < SEVERAL; i += 2)
		TRY(release_one(u[i]));
	for (i = SEVERAL - 2; i >= 0; i -= 2)
		TRY(release_one(u[i]));
	for (i = 0; i < 4; i++)
		CHECK(nvd_free(va[i]) == 0, "cudaFree after release still found a registration");
	TRY(clean(&b, "several"));
	snprintf(result, sizeof(result), "PASS %d overlapping registrations alive at once, released out of order", SEVERAL);
	return 0;
}

/* ---------------------------------------------------- dma_map refusals */

/* What a registration is to be refused for: one knob of the NVIDIA double,
 * set for that registration only (0: the driver's own value). */
struct refusal {
	u32 page_size;		/* NVIDIA_P2P_PAGE_SIZE_* of its GPU memory */
	u32 mapping_version;	/* of the mapping dma_map_pages returns */
	u32 table_version;	/* of the page table get_pages returns */
	const char *what;
};

/* A registration refused with -EINVAL by dma_map, nothing left mapped or
 * pinned afterwards; a page table of another layout is refused before
 * nvidia_p2p_dma_map_pages is called at all, an incompatible mapping is
 * unmapped again. */
static int refuse_one(const char *client, bool inval, const struct refusal *r)
{
	struct nvd_stats s0, s1;
	struct pcd_umem *u;
	u64 va;
	int ret;

	va = gpu_alloc(4 * SZ64K, r->page_size);
	CHECK(va, "cannot allocate simulated GPU memory");
	nvd_set_mapping_version(r->mapping_version);
	nvd_set_page_table_version(r->table_version);
	nvd_get_stats(&s0);
	ret = pcd_umem_get(va, 2 * SZ64K, inval, client, &u);
	nvd_get_stats(&s1);
	nvd_set_mapping_version(0);
	nvd_set_page_table_version(0);
	if (!ret)
		pcd_umem_release(u);
	CHECK(ret == -EINVAL, "%s: %s: registration returned %d, want -EINVAL from dma_map", client, r->what, ret);
	if (r->table_version)
		CHECK(s1.dma_map == s0.dma_map, "%s: %s: dma_map_pages was called on a table of another layout",
		      client, r->what);
	CHECK(s1.maps_live == s0.maps_live, "%s: %s: a refused dma_map left %ld mapping(s) mapped",
	      client, r->what, s1.maps_live - s0.maps_live);
	CHECK(s1.tables_live == s0.tables_live, "%s: %s: a refused registration left %ld page table(s) pinned",
	      client, r->what, s1.tables_live - s0.tables_live);
	if (r->mapping_version)
		CHECK(s1.dma_unmap == s0.dma_unmap + 1, "%s: %s: the incompatible mapping was not unmapped",
		      client, r->what);
	CHECK(nvd_free(va) == 0, "cudaFree found a registration left behind");
	TRY(errors_since(r->what));
	return 0;
}

static int sc_dma_map_refusals(void)
{
	static const char *const names[] = { NV, NC };
	static const struct refusal refusals[] = {
		{ NVIDIA_P2P_PAGE_SIZE_4KB, 0, 0, "4 KiB pages" },
		{ NVIDIA_P2P_PAGE_SIZE_128KB, 0, 0, "128 KiB pages" },
		{ NVIDIA_P2P_PAGE_SIZE_64KB, 0x00010003, 0, "mapping version 1.3" },
		{ NVIDIA_P2P_PAGE_SIZE_64KB, 0x00030003, 0, "mapping version 3.3" },
		{ NVIDIA_P2P_PAGE_SIZE_64KB, 0x00020002, 0, "mapping version 2.2" },
	};
	struct pcd_umem *u;
	struct base b;
	u64 va;
	int i, j;

	TRY(begin(&b));
	for (i = 0; i < ARRAY_SIZE(names); i++) {
		bool inval = i == 0;

		for (j = 0; j < ARRAY_SIZE(refusals); j++)
			TRY(refuse_one(names[i], inval, &refusals[j]));
	}
	/* a newer minor version is compatible */
	va = gpu_alloc(4 * SZ64K, NVIDIA_P2P_PAGE_SIZE_64KB);
	nvd_set_mapping_version(0x00020007);
	i = pcd_umem_get(va, SZ64K, true, NV, &u);
	nvd_set_mapping_version(0);
	CHECK(!i, "mapping version 2.7 (compatible minor) refused: %d", i);
	pcd_umem_release(u);
	nvd_free(va);
	TRY(clean(&b, "dma_map refusals"));
	snprintf(result, sizeof(result), "PASS 4 KiB, 128 KiB and mapping versions 1.3/3.3/2.2 refused with -EINVAL, nothing left mapped; 2.7 accepted");
	return 0;
}

/* ---------------------------------------------------- page table version */

/* nv-p2p.h's NVIDIA_P2P_VERSION_COMPATIBLE for the page table: a client
 * reads a table only when its major version is the one the client was
 * built for and its minor is the same or newer (docs/contracts.md,
 * "Versioned structures"). The versions are the driver's own
 * (nvd_header_page_table_version: 535-style 0x00010002, 580-style
 * 0x00020000) and the neighbouring ones. On a 580-style driver, a table
 * with NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE (580's coherent-platform
 * memory) maps as any other. */
static int sc_page_table_version(void)
{
	static const char *const names[] = { NV, NC };
	const u32 own = nvd_header_page_table_version();
	const u32 major = own >> 16, minor = own & 0xffff;
	static char what[80];
	struct pcd_umem *u;
	struct base b;
	bool flags;
	u64 va;
	int i, j, ret;

	TRY(begin(&b));
	for (i = 0; i < ARRAY_SIZE(names); i++) {
		const bool inval = i == 0;
		const u32 versions[] = {
			(major + 1) << 16,
			major > 1 ? ((major - 1) << 16) | 0xffff : 0x00030000,
			own - 1,	/* an older minor, where there is one */
		};

		for (j = 0; j < ARRAY_SIZE(versions) - !minor; j++) {
			struct refusal r = { NVIDIA_P2P_PAGE_SIZE_64KB, 0, versions[j], what };

			snprintf(what, sizeof(what), "page table version %#x (driver header %#x)",
				 versions[j], own);
			TRY(refuse_one(names[i], inval, &r));
		}
	}
	/* a newer minor version of the same layout is compatible */
	va = gpu_alloc(4 * SZ64K, NVIDIA_P2P_PAGE_SIZE_64KB);
	CHECK(va, "cannot allocate simulated GPU memory");
	nvd_set_page_table_version(own + 1);
	ret = pcd_umem_get(va, SZ64K, true, NV, &u);
	nvd_set_page_table_version(0);
	CHECK(!ret, "page table version %#x (newer minor of the driver's %#x) refused: %d", own + 1, own, ret);
	pcd_umem_release(u);
	/* 580+: CPU-cacheable memory registers and maps like any other */
	flags = nvd_set_page_table_flags(1);
	if (flags) {
		ret = pcd_umem_get(va, 2 * SZ64K, true, NV, &u);
		nvd_set_page_table_flags(0);
		CHECK(!ret, "a page table with flags CPU_CACHEABLE refused: %d", ret);
		pcd_umem_release(u);
	}
	CHECK(nvd_free(va) == 0, "cudaFree found a registration left behind");
	TRY(clean(&b, "page table version"));
	snprintf(result, sizeof(result),
		 "PASS driver's page table %#x: majors %u and %u%s refused with -EINVAL before dma_map; %#x accepted%s",
		 own, major + 1, major > 1 ? major - 1 : 3, minor ? " and an older minor" : "", own + 1,
		 flags ? "; CPU_CACHEABLE table maps" : " (no page table flags before 580)");
	return 0;
}

/* --------------------------------------------------------- invalidation */

/* The registrations sc_invalidate_body() holds; released even when it fails,
 * so one failure does not cascade into the next scenarios. */
static struct pcd_umem *inval_u[2];
static bool inval_released[2];

static int sc_invalidate_body(void);

static int sc_invalidate(void)
{
	int ret, i;

	memset(inval_u, 0, sizeof(inval_u));
	memset(inval_released, 0, sizeof(inval_released));
	ret = sc_invalidate_body();
	for (i = 0; i < 2; i++) {
		if (!inval_u[i])
			continue;
		if (!inval_released[i])
			pcd_umem_release(inval_u[i]);
		pcd_umem_put(inval_u[i]);
	}
	return ret;
}

static int sc_invalidate_body(void)
{
	/* static: too big for the stack together; scenarios run one at a
	 * time under ctl_lock */
	static struct nvd_stats s0, s1, s2;
	static struct pcd_stats c0, c1;
	static struct base b;
	struct pcd_umem **u = inval_u;
	bool legacy;
	u64 va;
	int i, n;

	TRY(begin(&b));
	CHECK(pcd_clients(clients, ARRAY_SIZE(clients)) >= 1 && !strcmp(clients[0].name, NV),
	      "nv_mem is not registered");
	legacy = !(clients[0].flags & PEER_MEM_INVALIDATE_UNMAPS);
	va = gpu_alloc(8 * SZ64K, NVIDIA_P2P_PAGE_SIZE_64KB);
	CHECK(va, "cannot allocate simulated GPU memory");
	for (i = 0; i < 2; i++) {
		struct pcd_umem *got;

		TRY(lifecycle_one(va, i ? 4 * SZ64K : 0x100, i ? 2 * SZ64K : 3 * SZ64K, true, NV, &got));
		pcd_umem_hold(got);
		u[i] = got;
	}
	nvd_get_stats(&s0);
	pcd_get_stats(&c0);
	n = nvd_free(va);	/* cudaFree under two live registrations */
	nvd_get_stats(&s1);
	pcd_get_stats(&c1);
	TRY(errors_since("invalidation"));
	CHECK(n == 2, "cudaFree called %d free callbacks, want 2", n);
	CHECK(c1.invalidations == c0.invalidations + 2,
	      "the core's invalidate callback ran %ld times for 2 freed registrations (the free callback must call it)",
	      c1.invalidations - c0.invalidations);
	CHECK(c1.unknown_tickets == c0.unknown_tickets, "invalidate named an unknown core_context");
	for (i = 0; i < 2; i++) {
		CHECK(u[i]->invalidations == 1, "registration %d invalidated %d times, want exactly 1", i,
		      u[i]->invalidations);
		CHECK(u[i]->invalidated_context == u[i]->xa_id,
		      "registration %d invalidated with core_context %llu, want %u (the one get_pages got)",
		      i, u[i]->invalidated_context, u[i]->xa_id);
		CHECK(u[i]->hca_stops == 1, "registration %d: the core told the HCA to stop DMA %d times, want 1",
		      i, u[i]->hca_stops);
		/* peer_mem.c: a legacy client's registration ends UNMAPPED (the
		 * core unmapped it), an unmap-on-invalidate one INVALIDATED */
		CHECK(pcd_umem_state(u[i]) == (legacy ? PCD_UNMAPPED : PCD_INVALIDATED),
		      "registration %d is in core state %d after the invalidation, want %d", i,
		      pcd_umem_state(u[i]), legacy ? PCD_UNMAPPED : PCD_INVALIDATED);
		/* peer_mem.c ib_peer_unmap_on_invalidate(): a PEER_MEM_INVALIDATE_UNMAPS
		 * client unmaps itself; a legacy client gets dma_unmap + put_pages
		 * from inside the invalidation */
		CHECK(u[i]->inval_unmaps == (legacy ? 1 : 0),
		      "registration %d: the core called dma_unmap %d times inside the invalidation, want %d (%s client)",
		      i, u[i]->inval_unmaps, legacy ? 1 : 0, legacy ? "legacy" : "PEER_MEM_INVALIDATE_UNMAPS");
	}
	/* dma_unmap/put_pages made by the core inside the callback: no-ops */
	CHECK(s1.dma_unmap == s0.dma_unmap && s1.put_pages == s0.put_pages,
	      "inside the free callback the client called dma_unmap_pages %ld and put_pages %ld times, want 0",
	      s1.dma_unmap - s0.dma_unmap, s1.put_pages - s0.put_pages);
	CHECK(s1.free_dma_mapping == s0.free_dma_mapping + 2 && s1.free_page_table == s0.free_page_table + 2,
	      "the free callbacks freed %ld mappings and %ld page tables, want 2 and 2",
	      s1.free_dma_mapping - s0.free_dma_mapping, s1.free_page_table - s0.free_page_table);
	CHECK(s1.stale_frees == s0.stale_frees, "free of an unknown mapping/page table in the callback");
	CHECK(s1.tables_live == s0.tables_live - 2 && s1.maps_live == s0.maps_live - 2,
	      "after cudaFree %ld tables and %ld mappings remain", s1.tables_live - b.n.tables_live,
	      s1.maps_live - b.n.maps_live);
	/* the later release must not unmap/put again, only release */
	for (i = 0; i < 2; i++) {
		int again;

		pcd_umem_release(u[i]);
		again = u[i]->teardown_unmaps;
		pcd_umem_put(u[i]);
		u[i] = NULL;	/* released and put: nothing left for the caller */
		CHECK(again == 0, "release unmapped an invalidated registration again");
	}
	nvd_get_stats(&s2);
	CHECK(s2.dma_unmap == s1.dma_unmap && s2.put_pages == s1.put_pages,
	      "release after invalidation called dma_unmap_pages %ld / put_pages %ld times, want 0",
	      s2.dma_unmap - s1.dma_unmap, s2.put_pages - s1.put_pages);
	TRY(clean(&b, "invalidate"));
	snprintf(result, sizeof(result), "PASS %s: cudaFree under 2 registrations: 2 invalidations with their core contexts, %s, no calls back into nvidia.ko from the callback, mapping and page table freed once each",
		 legacy ? "legacy client" : "PEER_MEM_INVALIDATE_UNMAPS client",
		 legacy ? "the core unmapped inside them" : "the client unmapped itself");
	return 0;
}

/* ------------------------------------------------ pins per registration */

/*
 * How many pins (get_pages calls) a clean registration through @client
 * makes: 2 for a client that probes in acquire (get_pages, put_pages at
 * once) and pins again in get_pages (nvidia-peermem 535 to 595, Mellanox
 * 1.3, nv_peer_mem's nv_mem_nc), 1 for one that keeps acquire's pin for
 * get_pages (nv_peer_mem's nv_mem). The scenarios that fail or free
 * during a given call count from it.
 */
static int pins_per_registration(const char *client, bool inval, long *pins)
{
	struct nvd_stats s0, s1;
	struct pcd_umem *u = NULL;
	u64 va;
	int ret;

	va = gpu_alloc(2 * SZ64K, NVIDIA_P2P_PAGE_SIZE_64KB);
	CHECK(va, "cannot allocate simulated GPU memory");
	nvd_get_stats(&s0);
	ret = pcd_umem_get(va, SZ64K, inval, client, &u);
	nvd_get_stats(&s1);
	if (!ret)
		pcd_umem_release(u);
	nvd_free(va);
	CHECK(!ret, "%s: a plain registration failed: %d", client, ret);
	*pins = (s1.get_pages - s0.get_pages) + (s1.get_pages_persistent - s0.get_pages_persistent);
	CHECK(*pins == 1 || *pins == 2, "%s: a registration made %ld pins, want 1 or 2", client, *pins);
	return 0;
}

/* ------------------------------------------------- free during get_pages */

/*
 * cudaFree while the core registers the range: MLNX_OFED's core holds the
 * registration's mapping lock from before get_pages until the HCA arms
 * invalidation, and the NVIDIA driver calls the free callback under its own
 * lock, which dma_map_pages takes too. A free callback that calls the
 * core's invalidate then waits for the mapping lock: here, on the same
 * thread, a hang; on real hardware, a deadlock with the registering thread
 * waiting in dma_map_pages. The registration must fail cleanly instead.
 */
static int sc_free_during_get(void)
{
	static struct nvd_stats s0, s1;	/* static: see sc_invalidate */
	static struct base b;
	struct pcd_umem *u;
	long pins;
	u64 va;
	int ret;

	TRY(pins_per_registration(NV, true, &pins));
	TRY(begin(&b));
	va = gpu_alloc(4 * SZ64K, NVIDIA_P2P_PAGE_SIZE_64KB);
	CHECK(va, "cannot allocate simulated GPU memory");
	nvd_get_stats(&s0);
	/* during the pin that backs the registration: the 2nd get_pages of a
	 * client that probes first, the only one of one that keeps it */
	nvd_free_during_get_pages(va, pins);
	ret = pcd_umem_get(va, 2 * SZ64K, true, NV, &u);
	nvd_free_during_get_pages(0, 0);
	nvd_get_stats(&s1);
	if (!ret)
		pcd_umem_release(u);
	CHECK(ret, "registration succeeded although its GPU memory was freed during get_pages");
	CHECK(s1.callbacks == s0.callbacks + 1, "%ld free callbacks, want 1", s1.callbacks - s0.callbacks);
	CHECK(s1.dma_map == s0.dma_map, "dma_map_pages was called on a page table the driver had freed");
	TRY(clean(&b, "free_during_get"));
	snprintf(result, sizeof(result), "PASS cudaFree inside get_pages: no invalidation under the core's mapping lock, registration failed with %d, nothing leaked",
		 ret);
	return 0;
}

/* ------------------------------------------------------------------ nc */

static int nc_body(const char *client)
{
	static struct nvd_stats s0, s1, s2;	/* static: see sc_invalidate */
	static struct pcd_stats c0, c1;
	static struct base b;
	struct pcd_umem *u;
	u64 va;
	long calls;
	bool ticket;
	int n;

	TRY(begin(&b));
	va = gpu_alloc(8 * SZ64K, NVIDIA_P2P_PAGE_SIZE_64KB);
	CHECK(va, "cannot allocate simulated GPU memory");
	nvd_get_stats(&s0);
	/* a registration that cannot handle invalidation skips nv_mem */
	TRY(lifecycle_one(va, 0x3000, 2 * SZ64K, false, client, &u));
	nvd_get_stats(&s1);
	calls = s1.get_pages_persistent - s0.get_pages_persistent;
	ticket = u->xa_id != PCD_NO_INVALIDATION_ID;
	if (calls != 1 || ticket) {
		/* Released before failing: a registration left alive holds a
		 * reference on the client's module, and the oracle could not
		 * unload it for the columns after it. */
		pcd_umem_release(u);
		nvd_free(va);
	}
	CHECK(calls == 1, "%s made %ld get_pages_persistent calls, want 1", client, calls);
	CHECK(!ticket, "nc registration got an invalidation ticket");
	pcd_get_stats(&c0);
	n = nvd_free(va);
	pcd_get_stats(&c1);
	nvd_get_stats(&s2);
	CHECK(n == 0, "cudaFree called %d free callbacks on persistent pages, want 0", n);
	CHECK(c1.invalidations == c0.invalidations, "an invalidation reached the core for a persistent registration");
	CHECK(s2.tables_live == s1.tables_live && s2.allocs_live == s1.allocs_live,
	      "persistent pages released by cudaFree while registered");
	pcd_umem_release(u);
	nvd_get_stats(&s2);
	CHECK(s2.put_pages_persistent == s1.put_pages_persistent + 1,
	      "release made %ld put_pages_persistent calls, want 1", s2.put_pages_persistent - s1.put_pages_persistent);
	TRY(clean(&b, client));
	snprintf(result, sizeof(result), "PASS %s: persistent get/put pages, no free callback, no invalidation",
		 client);
	return 0;
}

static int sc_nc(void)
{
	return nc_body(NC);
}

/* The default module: the persistent client answers to nv_mem. */
static int sc_nc_as_nv_mem(void)
{
	return nc_body(NV);
}

/* ---------------------------------------------------- failure injection */

static int inject_flow(const char *client, bool inval, int *fired)
{
	/* The calls of one lifecycle, in order (the module's documented flow). */
	static const char *const seq_nv[] = { "get_pages", "put_pages", "get_pages", "dma_map_pages",
					      "dma_unmap_pages", "put_pages" };
	static const char *const seq_nc[] = { "get_pages", "put_pages", "get_pages_persistent", "dma_map_pages",
					      "dma_unmap_pages", "put_pages_persistent" };
	/* A client that keeps acquire's pin for get_pages. */
	static const char *const seq_kept[] = { "get_pages", "dma_map_pages", "dma_unmap_pages", "put_pages" };
	const char *const *seq = inval ? seq_nv : seq_nc;
	long pins;
	int nth, calls;

	TRY(pins_per_registration(client, inval, &pins));
	if (pins == 1)
		seq = seq_kept;
	calls = pins == 1 ? 4 : 6;

	for (nth = 1; nth <= 16; nth++) {
		struct nvd_stats s0, s1;
		struct pcd_umem *u = NULL;
		struct base b;
		int ret, unmap_ret = 0;
		u64 va;

		TRY(begin(&b));
		va = gpu_alloc(4 * SZ64K, NVIDIA_P2P_PAGE_SIZE_64KB);
		CHECK(va, "cannot allocate simulated GPU memory");
		nvd_fail_nth(nth, INJ_ERR);
		ret = pcd_umem_get(va + 0x100, 2 * SZ64K, inval, client, &u);
		if (!ret) {
			pcd_umem_hold(u);
			pcd_umem_release(u);
			unmap_ret = u->dma_unmap_ret;
			pcd_umem_put(u);
		}
		nvd_get_stats(&s0);
		nvd_fail_nth(0, 0);
		if (!s0.injected) {
			CHECK(!ret, "%s: lifecycle failed (%d) without an injected error", client, ret);
			nvd_free(va);
			TRY(clean(&b, "after the last call"));
			CHECK(nth == calls + 1, "%s: a lifecycle made %d provider calls, want %d", client, nth - 1,
			      calls);
			break;
		}
		(*fired)++;
		CHECK(nth <= calls && !strcmp(s0.injected_call, seq[nth - 1]),
		      "%s: provider call %d was %s, want %s", client, nth, s0.injected_call,
		      nth <= calls ? seq[nth - 1] : "none");
		if (nth == 1 || (pins == 2 && nth == 2)) {
			/* acquire's pin, or its probe's get_pages and put_pages */
			CHECK(ret == -ENXIO, "%s: %s failing in acquire: registration returned %d, want \"not mine\"",
			      client, s0.injected_call, ret);
		} else if (!strcmp(s0.injected_call, "dma_unmap_pages")) {
			/* peer_mem.h: dma_unmap "Must return 0"; the core ignores it */
			CHECK(!ret && unmap_ret == 0, "%s: dma_unmap_pages failing: dma_unmap returned %d, want 0",
			      client, unmap_ret);
		} else if (nth == calls) {
			CHECK(!ret, "%s: registration failed (%d) before the injected call", client, ret);
		} else {
			CHECK(ret == INJ_ERR, "%s: %s failing: registration returned %d, want %d",
			      client, s0.injected_call, ret, INJ_ERR);
		}
		{
			/* A failed non-persistent put_pages (535: -ENOMEM before
			 * RM) leaves the table pinned: its free callback comes
			 * with the cudaFree. Anything else leaves nothing. */
			int due = (pins == 2 && nth == 2) || (inval && nth == calls);

			CHECK(nvd_free(va) == due, "%s: %s failing left %s", client, s0.injected_call,
			      due ? "no free callback due (want 1)" : "a registration behind");
		}
		nvd_get_stats(&s1);
		/* a released table must not be released again */
		CHECK(s1.stale_puts == b.n.stale_puts, "%s: after %s failed the client put the pages again",
		      client, s0.injected_call);
		{
			char when[64];

			snprintf(when, sizeof(when), "%s failing in %s", s0.injected_call, client);
			TRY(clean(&b, when));
		}
	}
	return 0;
}

static int sc_inject(void)
{
	int fired = 0;

	TRY(inject_flow(NV, true, &fired));
	TRY(inject_flow(NC, false, &fired));
	snprintf(result, sizeof(result), "PASS %d provider calls failed in turn (nv_mem, nv_mem_nc): errors reached the core, nothing leaked",
		 fired);
	return 0;
}

/* ------------------------------------------- stale page table, late callbacks */

/*
 * A failed get_pages leaves no page table behind: nvidia.ko (535) frees the
 * table it had written to the caller's slot; the double writes a tombstone
 * there and reports any use of it. The hca_driver hook calls dma_map after
 * the failure (the core never would), so a client that kept the pointer
 * hands it to the driver.
 */
static int stale_one(const char *client, bool inval)
{
	struct base b;
	int ret, get_ret = 0, map_ret = 0;
	long pins;
	u64 va;

	TRY(pins_per_registration(client, inval, &pins));
	TRY(begin(&b));
	va = gpu_alloc(2 * SZ64K, NVIDIA_P2P_PAGE_SIZE_64KB);
	CHECK(va, "cannot allocate simulated GPU memory");
	/* 1, 2: acquire's probe; 3: get_pages(_persistent). A client that
	 * keeps acquire's pin makes that pin the only one: its failure is
	 * "not mine", and the tombstone must go unused all the same. */
	nvd_fail_nth(pins == 1 ? 1 : 3, INJ_ERR);
	ret = pcd_client_dma_map_after_failed_get_pages(client, va, SZ64K, &get_ret, &map_ret);
	nvd_fail_nth(0, 0);
	if (pins == 1) {
		CHECK(ret == -ENXIO, "%s: acquire whose pin failed returned %d, want \"not mine\"", client, ret);
	} else {
		CHECK(!ret, "%s: acquire of GPU memory failed: %d", client, ret);
		CHECK(get_ret == INJ_ERR, "%s: get_pages returned %d, want the injected %d", client, get_ret,
		      INJ_ERR);
		CHECK(map_ret, "%s: dma_map after a failed get_pages succeeded", client);
	}
	CHECK(nvd_free(va) == 0, "%s: a failed get_pages left a page table pinned", client);
	{
		char when[64];

		snprintf(when, sizeof(when), "dma_map after a failed get_pages (%s)", client);
		TRY(clean(&b, when));
	}
	return 0;
}

static int sc_stale_page_table(void)
{
	TRY(stale_one(NV, true));
	TRY(stale_one(NC, false));
	snprintf(result, sizeof(result),
		 "PASS dma_map after a failed get_pages (nv_mem, nv_mem_nc) refused without touching the freed page table");
	return 0;
}

/*
 * late_callback, two shell steps around an rmmod (guest/init): "orphan"
 * makes acquire's probe put_pages fail as 535 can (-ENOMEM before RM), so
 * the table stays pinned with the module's probe callback due although
 * acquire said "not mine"; "free_orphan" frees the memory, and the driver
 * calls that callback.
 */
static u64 orphan_va;

static int cmd_orphan(void)
{
	struct nvd_stats s;
	struct base b;
	void *ctx = NULL;
	int ret;

	TRY(begin(&b));
	CHECK(!orphan_va, "orphan: already made");
	orphan_va = gpu_alloc(2 * SZ64K, NVIDIA_P2P_PAGE_SIZE_64KB);
	CHECK(orphan_va, "cannot allocate simulated GPU memory");
	/* nv_mem keeps acquire's pin: released before get_pages (the core's
	 * error paths), it is release that unpins, and that unpin fails */
	ret = pcd_client_acquire(NV, orphan_va, SZ64K, &ctx);
	CHECK(ret == 1, "acquire of GPU memory returned %d, want 1", ret);
	nvd_fail_nth(1, INJ_ERR);
	pcd_client_release(NV, ctx);
	nvd_get_stats(&s);
	nvd_fail_nth(0, 0);
	CHECK(s.injected && !strcmp(s.injected_call, "put_pages"),
	      "release's put_pages was not the injected call (%s)", s.injected ? s.injected_call : "none");
	CHECK(s.tables_live == b.n.tables_live + 1, "the kept pin's page table is not pinned any more (%ld live)",
	      s.tables_live - b.n.tables_live);
	TRY(errors_since("orphan"));
	snprintf(result, sizeof(result), "PASS unpin at release failed: page table pinned, free callback due");
	return 0;
}

static int cmd_free_orphan(void)
{
	int calls;

	CHECK(orphan_va, "free_orphan: no orphan made");
	calls = nvd_free(orphan_va);
	orphan_va = 0;
	CHECK(calls == 1, "cudaFree made %d free callbacks, want 1 (the kept pin's)", calls);
	TRY(errors_since("free_orphan"));
	snprintf(result, sizeof(result), "PASS the driver called the free callback");
	return 0;
}

/* ----------------------------------------------------------------- race */

#define RACE_ITERS (10000 / iter_divisor)

static struct {
	atomic_t go, done;
	u64 va;
	int stop;
	struct completion exited;
} race;

static int race_freer(void *unused)
{
	int i;

	for (i = 1; i <= RACE_ITERS; i++) {
		/* cond_resched: the scenario's own thread may have migrated to
		 * this CPU (it is not bound); on a kernel without full
		 * preemption a plain spin would never let it run. */
		while (atomic_read_acquire(&race.go) < i && !READ_ONCE(race.stop)) {
			cpu_relax();
			cond_resched();
		}
		if (READ_ONCE(race.stop))
			break;
		ndelay(get_random_u32() % 3000);
		nvd_free(race.va);	/* cudaFree: free callback -> invalidate */
		atomic_set_release(&race.done, i);
	}
	complete(&race.exited);
	return 0;
}

static int sc_race(void)
{
	static struct nvd_stats s0, s1;		/* static: see sc_invalidate */
	static struct pcd_stats c0, c1;
	static struct base b;
	struct task_struct *t;
	long inval_first = 0, release_first = 0, overlapped = 0, contended = 0;
	int i, ret = 0;
	unsigned long deadline;

	if (num_online_cpus() < 2)
		FAIL("needs 2 online vCPUs, has %d (qemu -smp 2)", num_online_cpus());
	TRY(begin(&b));
	nvd_get_stats(&s0);
	pcd_get_stats(&c0);
	atomic_set(&race.go, 0);
	atomic_set(&race.done, 0);
	race.stop = 0;
	init_completion(&race.exited);
	t = kthread_create(race_freer, NULL, "nvpm_race");
	if (IS_ERR(t))
		FAIL("cannot start the race thread: %ld", PTR_ERR(t));
	kthread_bind(t, (raw_smp_processor_id() + 1) % num_online_cpus());
	wake_up_process(t);

	for (i = 1; i <= RACE_ITERS; i++) {
		struct pcd_umem *u;

		race.va = gpu_alloc(4 * SZ64K, NVIDIA_P2P_PAGE_SIZE_64KB);
		if (!race.va) {
			ret = -ENOMEM;
			break;
		}
		ret = pcd_umem_get(race.va + (i % 4) * 0x1000, SZ64K * (1 + i % 3), true, NV, &u);
		if (ret)
			break;
		pcd_umem_hold(u);
		atomic_set_release(&race.go, i);	/* publishes race.va */
		ndelay(get_random_u32() % 3000);
		pcd_umem_release(u);	/* dma_unmap, put_pages, release */
		deadline = jiffies + 60 * HZ;
		/* cond_resched: see race_freer; without it, both threads on
		 * one CPU livelock (seen on 6.12 as a soft lockup here). */
		while (atomic_read_acquire(&race.done) < i && time_before(jiffies, deadline)) {
			cpu_relax();
			cond_resched();
		}
		if (atomic_read(&race.done) < i) {
			ret = -ETIMEDOUT;
			break;
		}
		/* Default mode (peer_mem.c): either the invalidation came first
		 * and the client unmapped itself (the core makes no dma_unmap),
		 * or the teardown came first and the core called dma_unmap once;
		 * never both, never neither. */
		if (u->inval_unmaps || u->teardown_unmaps > 1 || u->invalidations > 1 ||
		    (!u->teardown_unmaps && !u->invalidations)) {
			snprintf(result, sizeof(result),
				 "FAIL iteration %d: dma_unmap from the core %d times inside the invalidation and %d outside it, invalidated %d times",
				 i, u->inval_unmaps, u->teardown_unmaps, u->invalidations);
			pcd_umem_put(u);
			ret = -EIO;
			break;
		}
		if (!u->teardown_unmaps)
			inval_first++;
		else if (u->invalidations)
			overlapped++;	/* invalidate found it, already unmapped */
		else
			release_first++;
		contended += u->lock_contended;
		pcd_umem_put(u);
		if (!(i % 256))
			cond_resched();
	}
	WRITE_ONCE(race.stop, 1);
	if (ret == -ETIMEDOUT) {
		FAIL("iteration %d: cudaFree did not return within 60 s (deadlock between the free callback and release?)",
		     i);	/* the thread is stuck: leave it */
	}
	wait_for_completion(&race.exited);
	if (ret == -EIO)
		return ret;
	CHECK(!ret, "iteration %d: registration failed: %d", i, ret);
	nvd_get_stats(&s1);
	pcd_get_stats(&c1);
	TRY(clean(&b, "race"));
	snprintf(result, sizeof(result),
		 "PASS %d iterations on 2 vCPUs: invalidation first %ld, release first %ld, invalidate after unmap %ld, lock contended %ld, stale puts %ld, stale frees %ld",
		 RACE_ITERS, inval_first, release_first, overlapped, contended,
		 s1.stale_puts - s0.stale_puts, s1.stale_frees - s0.stale_frees);
	return 0;
}

/* ------------------------------------------------------------ benchmark */

#define BENCH_ITERS (100000 / iter_divisor)

static int sc_bench(void)
{
	struct pcd_umem *u;
	struct base b;
	u64 va, t0, dt;
	int i, ret;

	TRY(begin(&b));
	va = gpu_alloc(4 * SZ64K, NVIDIA_P2P_PAGE_SIZE_64KB);
	CHECK(va, "cannot allocate simulated GPU memory");
	t0 = ktime_get_ns();
	for (i = 0; i < BENCH_ITERS; i++) {
		ret = pcd_umem_get(va + 0x1000, 2 * SZ64K, true, NV, &u);
		if (ret)
			break;
		pcd_umem_release(u);
		if (!(i % 1024))
			cond_resched();
	}
	dt = ktime_get_ns() - t0;
	CHECK(!ret, "iteration %d: registration failed: %d", i, ret);
	nvd_free(va);
	TRY(clean(&b, "benchmark"));
	snprintf(result, sizeof(result),
		 "PASS %d full registration lifecycles (acquire..release, 2 GPU pages, doubles included; TCG, slub_debug): %llu ns each, %llu ms total",
		 BENCH_ITERS, dt / BENCH_ITERS, dt / 1000000);
	return 0;
}

/* ----------------------------------------------------- rmmod and reload */

#define HOLD_MAX 16
static struct pcd_umem *held[HOLD_MAX];
static int nheld;
static u64 held_va;
static struct pcd_stats snap;

static int cmd_hold(int n)
{
	int i, ret;

	CHECK(!nheld && n > 0 && n <= HOLD_MAX, "hold: bad count %d (or already holding %d)", n, nheld);
	held_va = gpu_alloc(4 * SZ64K, NVIDIA_P2P_PAGE_SIZE_64KB);
	CHECK(held_va, "cannot allocate simulated GPU memory");
	for (i = 0; i < n; i++) {
		ret = pcd_umem_get(held_va, SZ64K, true, NV, &held[i]);
		CHECK(!ret, "hold: registration %d failed: %d", i, ret);
		nheld++;
	}
	snprintf(result, sizeof(result), "PASS holding %d registrations", n);
	return 0;
}

static int cmd_drop(void)
{
	while (nheld)
		pcd_umem_release(held[--nheld]);
	if (held_va)
		nvd_free(held_va);
	held_va = 0;
	TRY(errors_since("drop"));
	snprintf(result, sizeof(result), "PASS released");
	return 0;
}

static int cmd_cycles(int n)
{
	struct pcd_stats c;

	pcd_get_stats(&c);
	TRY(errors_since("load/unload cycles"));
	CHECK(c.registrations - snap.registrations == 2L * n,
	      "%d loads made %ld registrations, want %d", n, c.registrations - snap.registrations, 2 * n);
	CHECK(c.unregistrations - snap.unregistrations == 2L * n,
	      "%d unloads made %ld unregistrations, want %d", n, c.unregistrations - snap.unregistrations, 2 * n);
	CHECK(c.clients_live == 0, "%ld clients registered after the last unload", c.clients_live);
	snprintf(result, sizeof(result), "PASS %d load/unload cycles, %d registrations and unregistrations", n, 2 * n);
	return 0;
}

static int cmd_rollback(void)
{
	struct pcd_stats c;

	pcd_get_stats(&c);
	pcd_fail_register_nth(0);
	TRY(errors_since("rollback"));
	/* busybox insmod tries finit_module, then init_module: 1 or 2 loads */
	long regs = c.registrations - snap.registrations;
	long unregs = c.unregistrations - snap.unregistrations;

	CHECK(c.clients_live == 0, "%ld client(s) still registered after the failed load (first not rolled back)",
	      c.clients_live);
	CHECK(unregs >= 1 && regs == 2 * unregs,
	      "failed load(s) made %ld registrations and %ld unregistrations, want 2 per load and 1 (the first client) per load",
	      regs, unregs);
	snprintf(result, sizeof(result), "PASS second registration failed: load failed, first client unregistered");
	return 0;
}

/*
 * The leak ledger (pcd_ledger): per client name, over the whole run, what
 * the core handed out and the client has not given back: contexts
 * (acquire without release), pinned registrations (get_pages without
 * put_pages), dma mappings (dma_map without dma_unmap) and the sg tables
 * dma_map built and nobody freed. Any non-zero count fails the run.
 */
static char ledger_text[256];

static int check_ledger(void)
{
	static struct pcd_ledger_entry led[8];	/* static: kernel stack */
	int i, n = pcd_ledger(led, ARRAY_SIZE(led));
	size_t len = 0;

	ledger_text[0] = 0;
	CHECK(n > 0, "the leak ledger is empty: no client ever registered");
	for (i = 0; i < n; i++) {
		struct pcd_client_counts *k = &led[i].counts;

		CHECK(led[i].sg_tracked, "sg tables are not accounted (no kprobe on sg_free_table; see the console)");
		CHECK(!k->contexts_live && !k->pinned_live && !k->mapped_live && !k->sg_live,
		      "%s left: %ld contexts, %ld pinned registrations, %ld dma mappings, %ld sg tables",
		      led[i].name, k->contexts_live, k->pinned_live, k->mapped_live, k->sg_live);
		len += scnprintf(ledger_text + len, sizeof(ledger_text) - len, "%s%s",
				 i ? ", " : "ledger 0 contexts/pinned/mapped/sg tables left for ", led[i].name);
	}
	return 0;
}

static int sc_final(void)
{
	struct nvd_stats n;
	struct pcd_stats c;

	TRY(errors_since("the whole run"));
	nvd_get_stats(&n);
	pcd_get_stats(&c);
	/* (GPU allocations are the scenarios' own: a failed scenario may leave
	 * some; only what pins them is nv_peer_mem's) */
	CHECK(!n.tables_live && !n.maps_live && !c.umems_live,
	      "left alive: %ld page tables, %ld mappings, %ld registrations",
	      n.tables_live, n.maps_live, c.umems_live);
	CHECK(!n.maps_dropped, "%ld dma mapping(s) never unmapped by their client (freed only with their page table)",
	      n.maps_dropped);
	TRY(check_ledger());
	snprintf(result, sizeof(result), "PASS nothing left: %ld get_pages, %ld dma_map_pages, %ld free callbacks, %ld invalidations in total; %s",
		 n.get_pages + n.get_pages_persistent, n.dma_map, n.callbacks, c.invalidations, ledger_text);
	return 0;
}

/* ------------------------------------------------------------- control */

static int sc_register_legacy(void);

static const struct {
	const char *name;
	int (*fn)(void);
} scenarios[] = {
	{ "register", sc_register },
	{ "register_no_nc", sc_register_no_nc },
	{ "register_legacy", sc_register_legacy },
	{ "register_none", sc_register_none },
	{ "register_persistent", sc_register_persistent },
	{ "nc_as_nv_mem", sc_nc_as_nv_mem },
	{ "acquire", sc_acquire },
	{ "lifecycle", sc_lifecycle },
	{ "several", sc_several },
	{ "dma_map_refusals", sc_dma_map_refusals },
	{ "page_table_version", sc_page_table_version },
	{ "invalidate", sc_invalidate },
	{ "free_during_get", sc_free_during_get },
	{ "nc", sc_nc },
	{ "inject", sc_inject },
	{ "race", sc_race },
	{ "stale_page_table", sc_stale_page_table },
	{ "bench", sc_bench },
	{ "final", sc_final },
};

static int sc_register_legacy(void)
{
	struct pcd_umem *u;
	struct base b;
	u64 va;

	TRY(begin(&b));
	TRY(expect_clients(true, pcd_clients(clients, ARRAY_SIZE(clients)) > 1));
	va = gpu_alloc(4 * SZ64K, NVIDIA_P2P_PAGE_SIZE_64KB);
	CHECK(va, "cannot allocate simulated GPU memory");
	TRY(lifecycle_one(va, 0x10, SZ64K, true, NV, &u));
	TRY(release_one(u));
	nvd_free(va);
	TRY(clean(&b, "legacy"));
	snprintf(result, sizeof(result), "PASS nv_mem registered as a legacy client (version[15]=0, ex_size=0, flags=0); lifecycle works");
	return 0;
}

static bool squatting;

static int cmd_squat(bool on)
{
	int ret = 0;

	if (on && !squatting)
		ret = sysfs_add_link_to_group(kernel_kobj, "mm", &THIS_MODULE->mkobj.kobj,
					      "memory_peers");
	else if (!on && squatting)
		sysfs_remove_link_from_group(kernel_kobj, "mm", "memory_peers");
	if (ret)
		FAIL("cannot make /sys/kernel/mm/memory_peers: %d", ret);
	squatting = on;
	snprintf(result, sizeof(result), "PASS");
	return 0;
}

static int run_command(char *cmd)
{
	char *arg = strchr(cmd, ' ');
	int i, n = 0;

	if (arg) {
		*arg++ = 0;
		if (kstrtoint(arg, 10, &n))
			n = -1;
	}
	if (!strcmp(cmd, "run") && arg) {
		for (i = 0; i < ARRAY_SIZE(scenarios); i++)
			if (!strcmp(scenarios[i].name, arg))
				return scenarios[i].fn();
		FAIL("unknown scenario \"%s\"", arg);
	}
	if (!strcmp(cmd, "hold"))
		return cmd_hold(n);
	if (!strcmp(cmd, "drop"))
		return cmd_drop();
	if (!strcmp(cmd, "snapshot") || !strcmp(cmd, "fail_register")) {
		/* not a scenario: violations so far are left for the next one */
		pcd_get_stats(&snap);
		if (!strcmp(cmd, "fail_register"))
			pcd_fail_register_nth(n);
		snprintf(result, sizeof(result), "PASS");
		return 0;
	}
	if (!strcmp(cmd, "orphan"))
		return cmd_orphan();
	if (!strcmp(cmd, "free_orphan"))
		return cmd_free_orphan();
	if (!strcmp(cmd, "cycles"))
		return cmd_cycles(n);
	if (!strcmp(cmd, "rollback"))
		return cmd_rollback();
	if (!strcmp(cmd, "squat") || !strcmp(cmd, "unsquat"))
		return cmd_squat(!strcmp(cmd, "squat"));
	FAIL("unknown command \"%s\"", cmd);
}

static ssize_t ctl_write(struct file *f, const char __user *buf, size_t len, loff_t *pos)
{
	char cmd[64];
	int ret;

	if (len >= sizeof(cmd))
		return -EINVAL;
	if (copy_from_user(cmd, buf, len))
		return -EFAULT;
	cmd[len] = 0;
	strim(cmd);
	if (len && cmd[strlen(cmd) - 1] == '\n')
		cmd[strlen(cmd) - 1] = 0;
	mutex_lock(&ctl_lock);
	result[0] = 0;
	ret = run_command(cmd);
	pr_info("nvpm_scenarios: %s: %s\n", cmd, result);
	mutex_unlock(&ctl_lock);
	return ret ? ret : len;
}

static ssize_t result_read(struct file *f, char __user *buf, size_t len, loff_t *pos)
{
	char out[sizeof(result) + 1];
	int n;

	mutex_lock(&ctl_lock);
	n = scnprintf(out, sizeof(out), "%s\n", result);
	mutex_unlock(&ctl_lock);
	return simple_read_from_buffer(buf, len, pos, out, n);
}

static const struct file_operations ctl_fops = {
	.owner = THIS_MODULE,
	.write = ctl_write,
};

static const struct file_operations result_fops = {
	.owner = THIS_MODULE,
	.read = result_read,
};

static struct dentry *dir;

static int __init nvpm_init(void)
{
	if (iter_divisor < 1 || iter_divisor > 100) {
		pr_err("nvpm_scenarios: iter_divisor=%d, want 1..100\n", iter_divisor);
		return -EINVAL;
	}
	dir = debugfs_create_dir("nvpm", NULL);
	debugfs_create_file("ctl", 0200, dir, NULL, &ctl_fops);
	debugfs_create_file("result", 0400, dir, NULL, &result_fops);
	return 0;
}

static void __exit nvpm_exit(void)
{
	debugfs_remove_recursive(dir);
	cmd_squat(false);
	if (nheld)
		cmd_drop();
}

module_init(nvpm_init);
module_exit(nvpm_exit);
