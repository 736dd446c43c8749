// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * PeerDirect core test double: what MLNX_OFED's ib_core offers peer memory
 * clients, written from the ABI in kmod/compat/mofed/rdma/peer_mem.h (the
 * build copies it as OFA_KERNEL/include/rdma/peer_mem.h for nv_peer_mem).
 *
 *   - ib_register_peer_memory_client(): checks the mandatory callbacks,
 *     reads the new-style fields (version[15] == 1: ex_size, flags) and, only
 *     for a client that passes a non-NULL invalidate_callback pointer, writes
 *     the core's invalidate function into it; such a client "requires
 *     invalidation" and is used only for registrations that support it.
 *   - pcd_umem_get()/pcd_umem_release() drive a client the way MOFED's
 *     ib_peer_umem_get()/ib_peer_umem_release() do: acquire -> get_pages(addr,
 *     size, write=1, force=0, sg_head=NULL, ctx, core_context=ticket) ->
 *     dma_map(sg_head, ctx, dma_device, dmasync=0, &nmap), and at release,
 *     under the registration's mapping lock, dma_unmap -> put_pages unless
 *     invalidated, then release.
 *   - the invalidate callback finds the registration by its ticket (an
 *     xarray, because a client's core_context may outlive the umem), takes
 *     the mapping lock and, for a client with PEER_MEM_INVALIDATE_UNMAPS,
 *     itself calls dma_unmap and put_pages (from inside the client's NVIDIA
 *     free callback), marking the umem invalidated so that release does not
 *     call them again.
 *
 * Misuse that MOFED would crash or hang on (unregistering with live
 * registrations, unknown handles, invalidating as a client that asked for no
 * invalidation) is counted as a contract error with its text kept.
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/list.h>
#include <linux/xarray.h>
#include <linux/pci.h>
#include <linux/string.h>
#include <rdma/peer_mem.h>
#include "nvpm_doubles.h"

MODULE_LICENSE("Dual BSD/GPL");
MODULE_DESCRIPTION("Test double of MLNX_OFED's PeerDirect core (ib_register_peer_memory_client), for nv_peer_mem VM tests");

struct pcd_client {
	struct list_head node;
	const struct peer_memory_client *ops;
	struct pcd_client_info info;
	invalidate_peer_memory *slot;
	struct xarray umem_xa;		/* ticket -> umem, for invalidation */
	u32 next_ticket;
	long users;			/* live umems (under pcd_lock) */
};

static DEFINE_MUTEX(pcd_lock);		/* MOFED's peer_memory_mutex */
static LIST_HEAD(pcd_client_list);
static struct pcd_stats st;		/* under pcd_lock */
static long pcd_fail_register;
/* The HCA: only its struct device is used (clients pass it through
 * to_pci_dev() to nvidia_p2p_dma_map_pages). */
static struct pci_dev pcd_pdev;

static void pcd_error(const char *fmt, ...) __printf(1, 2);
static void pcd_error(const char *fmt, ...)
{
	va_list ap;
	char buf[160];

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	pr_notice("peer_core_double: contract violation: %s\n", buf);
	if (!st.errors++)
		strscpy(st.first_error, buf, sizeof(st.first_error));
}

static int pcd_invalidate(void *reg_handle, u64 core_context);

void *ib_register_peer_memory_client(const struct peer_memory_client *peer_client,
				     invalidate_peer_memory *invalidate_callback)
{
	struct pcd_client *c;
	const struct peer_memory_client_ex *ex;

	mutex_lock(&pcd_lock);
	st.registrations++;
	/* "fail the nth client": refuse while n-1 are registered, every time,
	 * since busybox insmod retries a failed finit_module with init_module */
	if (pcd_fail_register > 0 && st.clients_live == pcd_fail_register - 1) {
		pr_info("peer_core_double: failing registration of %.64s as asked\n",
			peer_client ? peer_client->name : "(null)");
		goto fail;
	}
	if (!peer_client) {
		pcd_error("register with a NULL client");
		goto fail;
	}
	/* MOFED's ib_memory_peer_check_mandatory() */
	if (!peer_client->acquire || !peer_client->get_pages ||
	    !peer_client->put_pages || !peer_client->get_page_size ||
	    !peer_client->dma_map || !peer_client->dma_unmap ||
	    !peer_client->release) {
		pcd_error("client %.64s lacks a mandatory callback", peer_client->name);
		goto fail;
	}
	if (strnlen(peer_client->name, IB_PEER_MEMORY_NAME_MAX) == IB_PEER_MEMORY_NAME_MAX ||
	    !peer_client->name[0]) {
		pcd_error("client name empty or not NUL-terminated");
		goto fail;
	}
	c = kzalloc(sizeof(*c), GFP_KERNEL);
	if (!c)
		goto fail;
	c->ops = peer_client;
	strscpy(c->info.name, peer_client->name, sizeof(c->info.name));
	memcpy(c->info.version, peer_client->version, sizeof(c->info.version));
	c->info.ops_complete = true;
	c->info.new_style = peer_client->version[IB_PEER_MEMORY_VER_MAX - 1] == 1;
	/* As MOFED: the ex fields exist only when version[15] says so (a
	 * legacy client may be a bare struct peer_memory_client). */
	if (c->info.new_style) {
		ex = container_of(peer_client, const struct peer_memory_client_ex, client);
		c->info.ex_size = ex->ex_size;
		if (ex->ex_size >= offsetofend(struct peer_memory_client_ex, flags))
			c->info.flags = ex->flags;
		else
			pcd_error("new-style client %s with ex_size %zu (< %zu)", c->info.name,
				  ex->ex_size, offsetofend(struct peer_memory_client_ex, flags));
	}
	xa_init_flags(&c->umem_xa, XA_FLAGS_ALLOC);
	if (invalidate_callback) {
		*invalidate_callback = pcd_invalidate;
		c->info.invalidation = true;
		c->info.slot_filled = true;
		c->slot = invalidate_callback;
	}
	list_add_tail(&c->node, &pcd_client_list);
	st.clients_live++;
	pr_info("peer_core_double: registered %s (%s, ex_size %zu, flags %#x, %s)\n",
		c->info.name, c->info.new_style ? "new-style" : "legacy",
		c->info.ex_size, c->info.flags,
		c->info.invalidation ? "with invalidation" : "no invalidation");
	mutex_unlock(&pcd_lock);
	return c;
fail:
	mutex_unlock(&pcd_lock);
	return NULL;
}
EXPORT_SYMBOL(ib_register_peer_memory_client);

static struct pcd_client *pcd_find_handle(void *reg_handle)
{
	struct pcd_client *c;

	list_for_each_entry(c, &pcd_client_list, node)
		if (c == reg_handle)
			return c;
	return NULL;
}

void ib_unregister_peer_memory_client(void *reg_handle)
{
	struct pcd_client *c;

	mutex_lock(&pcd_lock);
	st.unregistrations++;
	c = pcd_find_handle(reg_handle);
	if (!c) {
		pcd_error("unregister of an unknown handle %px (double unregister?)", reg_handle);
		goto out;
	}
	if (c->users) {
		/* MOFED waits for them (forever, if the module is going away) */
		pcd_error("unregister of %s with %ld registrations alive", c->info.name, c->users);
		goto out;	/* keep it: the umems still point at it */
	}
	list_del(&c->node);
	xa_destroy(&c->umem_xa);
	st.clients_live--;
	pr_info("peer_core_double: unregistered %s\n", c->info.name);
	kfree(c);
out:
	mutex_unlock(&pcd_lock);
}
EXPORT_SYMBOL(ib_unregister_peer_memory_client);

static void pcd_umem_free(struct kref *kref)
{
	struct pcd_umem *umem = container_of(kref, struct pcd_umem, kref);

	kfree(umem);
	mutex_lock(&pcd_lock);
	st.umems_live--;
	mutex_unlock(&pcd_lock);
}

/* ib_invalidate_peer_memory() of MOFED 5.x, with PEER_MEM_INVALIDATE_UNMAPS. */
static int pcd_invalidate(void *reg_handle, u64 core_context)
{
	struct pcd_client *c;
	struct pcd_umem *umem;

	mutex_lock(&pcd_lock);
	st.invalidations++;
	c = pcd_find_handle(reg_handle);
	if (!c || !c->info.invalidation) {
		pcd_error("invalidate with %s handle %px", c ? "a no-invalidation client's" : "an unknown",
			  reg_handle);
		mutex_unlock(&pcd_lock);
		return 0;
	}
	/* c cannot go away: its module is inside its NVIDIA free callback. */
	mutex_unlock(&pcd_lock);

	xa_lock(&c->umem_xa);
	umem = core_context <= U32_MAX ? xa_load(&c->umem_xa, core_context) : NULL;
	if (!umem) {
		/* released concurrently (or never mapped): nothing to do */
		xa_unlock(&c->umem_xa);
		mutex_lock(&pcd_lock);
		st.unknown_tickets++;
		mutex_unlock(&pcd_lock);
		return 0;
	}
	kref_get(&umem->kref);
	xa_unlock(&c->umem_xa);

	if (!mutex_trylock(&umem->mapping_lock)) {
		umem->lock_contended++;
		mutex_lock(&umem->mapping_lock);
	}
	umem->invalidations++;
	umem->invalidated_context = core_context;
	if (umem->state == PCD_MAPPED) {
		/* (the HCA's invalidation_func would stop DMA here) */
		if (c->info.flags & PEER_MEM_INVALIDATE_UNMAPS) {
			c->ops->dma_unmap(&umem->sgt, umem->client_ctx, &pcd_pdev.dev);
			c->ops->put_pages(&umem->sgt, umem->client_ctx);
			umem->inval_unmaps++;
		}
		memset(&umem->sgt, 0, sizeof(umem->sgt));
		umem->state = PCD_INVALIDATED;
	}
	mutex_unlock(&umem->mapping_lock);
	kref_put(&umem->kref, pcd_umem_free);
	return 0;
}

static struct pcd_client *pcd_find_name(const char *name)
{
	struct pcd_client *c;

	list_for_each_entry(c, &pcd_client_list, node)
		if (!strcmp(c->info.name, name))
			return c;
	return NULL;
}

int pcd_umem_get(unsigned long addr, size_t size, bool inval_supp,
		 const char *client, struct pcd_umem **out)
{
	struct pcd_client *c, *owner = NULL;
	struct pcd_umem *umem;
	void *ctx = NULL;
	int ret;

	umem = kzalloc(sizeof(*umem), GFP_KERNEL);
	if (!umem)
		return -ENOMEM;
	kref_init(&umem->kref);
	mutex_init(&umem->mapping_lock);
	umem->addr = addr;
	umem->size = size;
	umem->xa_id = PCD_NO_INVALIDATION_ID;

	/* ib_get_peer_client(): first client that claims the range */
	mutex_lock(&pcd_lock);
	st.umems_live++;
	list_for_each_entry(c, &pcd_client_list, node) {
		if (c->info.invalidation && !inval_supp)
			continue;
		if (client && strcmp(c->info.name, client))
			continue;
		ret = c->ops->acquire(addr, size, NULL, NULL, &ctx);
		if (ret < 0)
			pcd_error("%s: acquire returned %d (want 1 or 0)", c->info.name, ret);
		if (ret > 0) {
			owner = c;
			owner->users++;
			break;
		}
	}
	mutex_unlock(&pcd_lock);
	if (!owner) {
		kref_put(&umem->kref, pcd_umem_free);
		return -ENXIO;
	}
	umem->client = owner;
	umem->client_ctx = ctx;

	if (owner->info.invalidation) {
		ret = xa_alloc_cyclic(&owner->umem_xa, &umem->xa_id, umem,
				      XA_LIMIT(0, U32_MAX - 1), &owner->next_ticket,
				      GFP_KERNEL);
		if (ret < 0)
			goto err_release;
	}

	/*
	 * get_pages and dma_map under the mapping lock, so that an
	 * invalidation arriving meanwhile waits and then finds it mapped.
	 */
	mutex_lock(&umem->mapping_lock);
	ret = owner->ops->get_pages(addr, size, 1, 0, NULL, ctx, umem->xa_id);
	if (ret) {
		mutex_unlock(&umem->mapping_lock);
		goto err_xa;
	}
	ret = owner->ops->dma_map(&umem->sgt, ctx, &pcd_pdev.dev, 0, &umem->nmap);
	if (ret) {
		owner->ops->put_pages(&umem->sgt, ctx);
		mutex_unlock(&umem->mapping_lock);
		goto err_xa;
	}
	if (umem->nmap <= 0 || umem->nmap > umem->sgt.nents)
		pcd_error("%s: dma_map returned nmap %d for %u sg entries",
			  owner->info.name, umem->nmap, umem->sgt.nents);
	umem->state = PCD_MAPPED;
	mutex_unlock(&umem->mapping_lock);
	*out = umem;
	return 0;

err_xa:
	if (umem->xa_id != PCD_NO_INVALIDATION_ID)
		xa_erase(&owner->umem_xa, umem->xa_id);
err_release:
	owner->ops->release(ctx);
	mutex_lock(&pcd_lock);
	owner->users--;
	mutex_unlock(&pcd_lock);
	kref_put(&umem->kref, pcd_umem_free);
	return ret;
}
EXPORT_SYMBOL_GPL(pcd_umem_get);

void pcd_umem_release(struct pcd_umem *umem)
{
	struct pcd_client *c = umem->client;

	mutex_lock(&umem->mapping_lock);
	if (umem->state == PCD_MAPPED) {
		umem->dma_unmap_ret = c->ops->dma_unmap(&umem->sgt, umem->client_ctx, &pcd_pdev.dev);
		c->ops->put_pages(&umem->sgt, umem->client_ctx);
		umem->teardown_unmaps++;
		memset(&umem->sgt, 0, sizeof(umem->sgt));
	}
	umem->state = PCD_UNMAPPED;
	mutex_unlock(&umem->mapping_lock);
	if (umem->xa_id != PCD_NO_INVALIDATION_ID)
		xa_erase(&c->umem_xa, umem->xa_id);
	c->ops->release(umem->client_ctx);
	mutex_lock(&pcd_lock);
	c->users--;
	mutex_unlock(&pcd_lock);
	kref_put(&umem->kref, pcd_umem_free);
}
EXPORT_SYMBOL_GPL(pcd_umem_release);

int pcd_client_acquire(const char *client, unsigned long addr, size_t size, void **ctx)
{
	struct pcd_client *c;
	int ret = -ENOENT;

	mutex_lock(&pcd_lock);
	c = pcd_find_name(client);
	if (c) {
		ret = c->ops->acquire(addr, size, NULL, NULL, ctx);
		if (ret > 0)
			c->users++;
	}
	mutex_unlock(&pcd_lock);
	return ret;
}
EXPORT_SYMBOL_GPL(pcd_client_acquire);

void pcd_client_release(const char *client, void *ctx)
{
	struct pcd_client *c;

	mutex_lock(&pcd_lock);
	c = pcd_find_name(client);
	if (c) {
		c->ops->release(ctx);
		c->users--;
	}
	mutex_unlock(&pcd_lock);
}
EXPORT_SYMBOL_GPL(pcd_client_release);

unsigned long pcd_umem_page_size(struct pcd_umem *umem)
{
	return umem->client->ops->get_page_size(umem->client_ctx);
}
EXPORT_SYMBOL_GPL(pcd_umem_page_size);

const char *pcd_umem_client_name(struct pcd_umem *umem)
{
	return umem->client->info.name;
}
EXPORT_SYMBOL_GPL(pcd_umem_client_name);

int pcd_clients(struct pcd_client_info *out, int max)
{
	struct pcd_client *c;
	int n = 0;

	mutex_lock(&pcd_lock);
	list_for_each_entry(c, &pcd_client_list, node) {
		if (n < max) {
			out[n] = c->info;
			/* the client must still hold our callback */
			out[n].slot_filled = c->slot && *c->slot == pcd_invalidate;
		}
		n++;
	}
	mutex_unlock(&pcd_lock);
	return n;
}
EXPORT_SYMBOL_GPL(pcd_clients);

void pcd_get_stats(struct pcd_stats *out)
{
	mutex_lock(&pcd_lock);
	*out = st;
	mutex_unlock(&pcd_lock);
}
EXPORT_SYMBOL_GPL(pcd_get_stats);

long pcd_reset_errors(void)
{
	long n;

	mutex_lock(&pcd_lock);
	n = st.errors;
	st.errors = 0;
	st.first_error[0] = 0;
	mutex_unlock(&pcd_lock);
	return n;
}
EXPORT_SYMBOL_GPL(pcd_reset_errors);

void pcd_umem_hold(struct pcd_umem *umem)
{
	kref_get(&umem->kref);
}
EXPORT_SYMBOL_GPL(pcd_umem_hold);

void pcd_umem_put(struct pcd_umem *umem)
{
	kref_put(&umem->kref, pcd_umem_free);
}
EXPORT_SYMBOL_GPL(pcd_umem_put);

void pcd_fail_register_nth(long nth)
{
	mutex_lock(&pcd_lock);
	pcd_fail_register = nth;
	mutex_unlock(&pcd_lock);
}
EXPORT_SYMBOL_GPL(pcd_fail_register_nth);

struct device *pcd_dma_device(void)
{
	return &pcd_pdev.dev;
}
EXPORT_SYMBOL_GPL(pcd_dma_device);

static int __init pcd_init(void)
{
	pr_info("peer_core_double: PeerDirect core ready\n");
	return 0;
}

static void __exit pcd_exit(void)
{
	if (st.clients_live || st.umems_live)
		pr_err("peer_core_double: unloading with %ld clients and %ld registrations alive\n",
		       st.clients_live, st.umems_live);
	pr_info("peer_core_double: unloaded, %ld contract violations\n", st.errors);
}

module_init(pcd_init);
module_exit(pcd_exit);
