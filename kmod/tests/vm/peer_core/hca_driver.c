// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The HCA side of the VM harness, linked with MLNX_OFED's own peer_mem.c
 * (copied from the fixture tarball at build time, never into this
 * repository) into mofed_peer_core.ko. See ../README.md for what is real
 * and what is not.
 *
 * Two jobs:
 *
 * 1. An HCA driver that registers memory the way MLNX_OFED's
 *    ib_umem_get_peer() and mlx5 do: ib_peer_umem_get() (acquire,
 *    get_pages, dma_map, all by the real core), then
 *    ib_umem_activate_invalidation_notifier() for invalidation-capable
 *    registrations; at teardown ib_umem_stop_invalidation_notifier() and
 *    ib_peer_umem_release(). Its invalidation function plays mlx5's: it
 *    counts that the HCA was told to stop DMA.
 *
 * 2. A recorder between the clients and the real core. peer_mem.c's
 *    ib_register_peer_memory_client()/ib_unregister_peer_memory_client()
 *    are renamed at compile time (mofed_ib_*); the exported functions of
 *    the same name below register, with the real core, a copy of the
 *    client's peer_memory_client_ex (name, version, ex_size and flags
 *    unchanged, so the core takes the same decisions) whose callbacks
 *    forward to the client's and count what happens: live contexts, pinned
 *    registrations and dma mappings per client, which calls came from
 *    inside the core's invalidation, and the contract of
 *    include/rdma/peer_mem.h (acquire returns 0 or 1, dma_unmap returns 0,
 *    no call with a released context). The recorder takes no lock across a
 *    forwarded call, so it adds no ordering the real core does not have.
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/list.h>
#include <linux/pci.h>
#include <linux/sched/mm.h>
#include <linux/string.h>
#include <linux/kprobes.h>
#include <linux/xarray.h>
#include <linux/atomic.h>
#include <rdma/ib_umem.h>
#include "ib_peer_mem.h"
#include "nvpm_doubles.h"

MODULE_LICENSE("Dual BSD/GPL");
MODULE_DESCRIPTION("MLNX_OFED 25.10's PeerDirect core (peer_mem.c) with a test HCA driver, for nv_peer_mem VM tests");

/* peer_mem.c's own entry points, renamed by the Kbuild file. */
void *mofed_ib_register_peer_memory_client(const struct peer_memory_client *peer_client,
					   invalidate_peer_memory *invalidate_callback);
void mofed_ib_unregister_peer_memory_client(void *reg_handle);

#define HCA_SLOTS 4

struct pcd_client {
	bool used;
	int slot;
	const struct peer_memory_client *orig;
	struct peer_memory_client_ex shadow;	/* what the real core sees */
	void *core_handle;
	invalidate_peer_memory core_invalidate;	/* the core writes its callback here */
	invalidate_peer_memory *client_slot;
	struct pcd_client_info info;
	/* this client's name's entry in the ledger; its counts (but sg_live)
	 * under hca_lock */
	struct pcd_ledger_entry *ledger;
};

/*
 * The leak ledger: what each client name holds, as the core handed it out
 * and took it back, kept across unloads and reloads (a slot is reused by
 * the next registration; a name's entry is not), so the last scenario can
 * check that every client gave everything back.
 */
#define HCA_LEDGER 8
static struct pcd_ledger_entry ledger[HCA_LEDGER];	/* under hca_reg_lock */
static atomic_long_t ledger_sg_live[HCA_LEDGER];

/*
 * The sg tables clients build in dma_map, by their first scatterlist, until
 * sg_free_table frees them (a kprobe on sg_free_table sees every free,
 * whichever copy of the sg_table the client passes). Value: ledger index.
 */
static DEFINE_XARRAY_FLAGS(sg_live, XA_FLAGS_LOCK_IRQ);
static bool sg_probe_armed;

static struct pcd_client slots[HCA_SLOTS];
static DEFINE_MUTEX(hca_reg_lock);	/* registration order, slots */
static DEFINE_SPINLOCK(hca_lock);	/* counters, umem list */
static LIST_HEAD(hca_umems);
static struct pcd_stats st;		/* under hca_lock */
static long hca_fail_register;
/* The thread inside the core's invalidation, per client slot. */
static struct task_struct *in_core_invalidate[HCA_SLOTS];
/* Client restriction of the registration being made (pcd_umem_get's
 * @client), per thread: one at a time, under hca_get_lock. */
static DEFINE_MUTEX(hca_get_lock);
static const char *hca_only_client;
static struct task_struct *hca_only_task;

/* The HCA: its struct device is what clients pass to to_pci_dev(). */
static struct pci_dev hca_pdev;
static struct ib_device hca_ibdev = { .dma_device = &hca_pdev.dev };

static void hca_error(const char *fmt, ...) __printf(1, 2);
static void hca_error(const char *fmt, ...)
{
	va_list ap;
	char buf[160];
	unsigned long flags;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	pr_notice("mofed_peer_core: contract violation: %s\n", buf);
	spin_lock_irqsave(&hca_lock, flags);
	if (!st.errors++)
		strscpy(st.first_error, buf, sizeof(st.first_error));
	spin_unlock_irqrestore(&hca_lock, flags);
}

/* The live registration a client context belongs to (NULL while
 * ib_peer_umem_get is still running, or for a bare acquire). */
static struct pcd_umem *umem_of_ctx(struct pcd_client *c, void *ctx)
{
	struct pcd_umem *u;

	list_for_each_entry(u, &hca_umems, node)
		if (u->client == c && u->client_ctx == ctx)
			return u;
	return NULL;
}

static bool inside_invalidate(struct pcd_client *c)
{
	return READ_ONCE(in_core_invalidate[c->slot]) == current;
}

/* ------------------------------------------------- recording callbacks */

static int rec_acquire(struct pcd_client *c, unsigned long addr, size_t size,
		       void *priv, char *name, void **ctx)
{
	int ret;

	if (READ_ONCE(hca_only_task) == current && hca_only_client &&
	    strcmp(hca_only_client, c->info.name))
		return 0;	/* the scenario asked for another client */
	ret = c->orig->acquire(addr, size, priv, name, ctx);
	if (ret != 0 && ret != 1)
		hca_error("%s: acquire returned %d (peer_mem.h: 1 or 0)", c->info.name, ret);
	if (ret == 1) {
		spin_lock(&hca_lock);
		c->ledger->counts.contexts_live++;
		spin_unlock(&hca_lock);
	}
	return ret;
}

static int rec_get_pages(struct pcd_client *c, unsigned long addr, size_t size, int write,
			 int force, struct sg_table *sg_head, void *ctx, u64 core_context)
{
	int ret = c->orig->get_pages(addr, size, write, force, sg_head, ctx, core_context);

	if (!ret) {
		spin_lock(&hca_lock);
		c->ledger->counts.pinned_live++;
		spin_unlock(&hca_lock);
	}
	return ret;
}

static int rec_dma_map(struct pcd_client *c, struct sg_table *sg_head, void *ctx,
		       struct device *dev, int dmasync, int *nmap)
{
	int ret = c->orig->dma_map(sg_head, ctx, dev, dmasync, nmap);

	if (!ret) {
		unsigned long flags;
		void *old;

		if (*nmap <= 0 || *nmap > sg_head->nents)
			hca_error("%s: dma_map returned nmap %d for %u sg entries", c->info.name,
				  *nmap, sg_head->nents);
		spin_lock(&hca_lock);
		c->ledger->counts.mapped_live++;
		spin_unlock(&hca_lock);
		xa_lock_irqsave(&sg_live, flags);
		old = __xa_store(&sg_live, (unsigned long)sg_head->sgl,
				 xa_mk_value(c->ledger - ledger), GFP_ATOMIC);
		xa_unlock_irqrestore(&sg_live, flags);
		if (xa_is_err(old))
			hca_error("%s: out of memory tracking an sg table", c->info.name);
		else if (old)
			hca_error("%s: dma_map returned an sg table that is already in use", c->info.name);
		else
			atomic_long_inc(&ledger_sg_live[c->ledger - ledger]);
	}
	return ret;
}

static int rec_dma_unmap(struct pcd_client *c, struct sg_table *sg_head, void *ctx,
			 struct device *dev)
{
	bool inval = inside_invalidate(c);
	struct pcd_umem *u;
	int ret = c->orig->dma_unmap(sg_head, ctx, dev);

	if (ret)
		hca_error("%s: dma_unmap returned %d (peer_mem.h: must return 0)", c->info.name, ret);
	spin_lock(&hca_lock);
	c->ledger->counts.mapped_live--;
	u = umem_of_ctx(c, ctx);
	if (u) {
		if (inval)
			u->inval_unmaps++;
		else
			u->teardown_unmaps++;
		u->dma_unmap_ret = ret;
	}
	spin_unlock(&hca_lock);
	return ret;
}

static void rec_put_pages(struct pcd_client *c, struct sg_table *sg_head, void *ctx)
{
	c->orig->put_pages(sg_head, ctx);
	spin_lock(&hca_lock);
	c->ledger->counts.pinned_live--;
	spin_unlock(&hca_lock);
}

static unsigned long rec_get_page_size(struct pcd_client *c, void *ctx)
{
	return c->orig->get_page_size(ctx);
}

static void rec_release(struct pcd_client *c, void *ctx)
{
	c->orig->release(ctx);
	spin_lock(&hca_lock);
	c->ledger->counts.contexts_live--;
	spin_unlock(&hca_lock);
}

/* The client calls this (through its invalidate slot) instead of the
 * core's callback: marks the thread, counts, and calls the core's. */
static int rec_invalidate(struct pcd_client *c, void *reg_handle, u64 core_context)
{
	struct pcd_umem *u;
	bool known = false;
	int ret;

	if (reg_handle != c)
		hca_error("%s: invalidate with handle %px, registered as %px", c->info.name,
			  reg_handle, c);
	spin_lock(&hca_lock);
	st.invalidations++;
	list_for_each_entry(u, &hca_umems, node) {
		if (u->client == c && u->xa_id == core_context) {
			u->invalidations++;
			u->invalidated_context = core_context;
			known = true;
		}
	}
	if (!known)
		st.unknown_tickets++;
	spin_unlock(&hca_lock);
	WRITE_ONCE(in_core_invalidate[c->slot], current);
	ret = c->core_invalidate(c->core_handle, core_context);
	WRITE_ONCE(in_core_invalidate[c->slot], NULL);
	return ret;
}

/* sg_free_table(table): if table->sgl is a client's, it is freed now. */
static int sg_free_pre(struct kprobe *kp, struct pt_regs *regs)
{
	struct sg_table *table = (struct sg_table *)regs_get_kernel_argument(regs, 0);
	unsigned long flags;
	void *entry;

	if (!table || !table->sgl || xa_empty(&sg_live))
		return 0;
	xa_lock_irqsave(&sg_live, flags);
	entry = __xa_erase(&sg_live, (unsigned long)table->sgl);
	xa_unlock_irqrestore(&sg_live, flags);
	if (xa_is_value(entry))
		atomic_long_dec(&ledger_sg_live[xa_to_value(entry)]);
	return 0;
}

static struct kprobe sg_free_probe = {
	.symbol_name = "sg_free_table",
	.pre_handler = sg_free_pre,
};

/* One set of trampolines per slot: the core's callbacks carry no client. */
#define HCA_SLOT_FNS(n)								\
static int acquire_##n(unsigned long a, size_t s, void *p, char *nm, void **x)	\
{ return rec_acquire(&slots[n], a, s, p, nm, x); }				\
static int get_pages_##n(unsigned long a, size_t s, int w, int f,		\
			 struct sg_table *sg, void *x, u64 cc)			\
{ return rec_get_pages(&slots[n], a, s, w, f, sg, x, cc); }			\
static int dma_map_##n(struct sg_table *sg, void *x, struct device *d,		\
		       int ds, int *nm)						\
{ return rec_dma_map(&slots[n], sg, x, d, ds, nm); }				\
static int dma_unmap_##n(struct sg_table *sg, void *x, struct device *d)	\
{ return rec_dma_unmap(&slots[n], sg, x, d); }					\
static void put_pages_##n(struct sg_table *sg, void *x)			\
{ rec_put_pages(&slots[n], sg, x); }						\
static unsigned long get_page_size_##n(void *x)				\
{ return rec_get_page_size(&slots[n], x); }					\
static void release_##n(void *x)						\
{ rec_release(&slots[n], x); }							\
static int invalidate_##n(void *h, u64 cc)					\
{ return rec_invalidate(&slots[n], h, cc); }

HCA_SLOT_FNS(0)
HCA_SLOT_FNS(1)
HCA_SLOT_FNS(2)
HCA_SLOT_FNS(3)

#define HCA_SLOT_OPS(n) {							\
	.acquire = acquire_##n, .get_pages = get_pages_##n,			\
	.dma_map = dma_map_##n, .dma_unmap = dma_unmap_##n,			\
	.put_pages = put_pages_##n, .get_page_size = get_page_size_##n,	\
	.release = release_##n }

static const struct peer_memory_client slot_ops[HCA_SLOTS] = {
	HCA_SLOT_OPS(0), HCA_SLOT_OPS(1), HCA_SLOT_OPS(2), HCA_SLOT_OPS(3),
};
static invalidate_peer_memory const slot_invalidate[HCA_SLOTS] = {
	invalidate_0, invalidate_1, invalidate_2, invalidate_3,
};

/* ------------------------------------------------- client registration */

void *ib_register_peer_memory_client(const struct peer_memory_client *peer_client,
				     invalidate_peer_memory *invalidate_callback)
{
	struct pcd_client *c = NULL;
	int i, live = 0;
	void *handle;

	mutex_lock(&hca_reg_lock);
	spin_lock(&hca_lock);
	st.registrations++;
	spin_unlock(&hca_lock);
	for (i = 0; i < HCA_SLOTS; i++)
		live += slots[i].used;
	/* "fail the nth client": refuse while n-1 are registered, every time,
	 * since busybox insmod retries a failed finit_module with init_module */
	if (hca_fail_register > 0 && live == hca_fail_register - 1) {
		pr_info("mofed_peer_core: failing registration of %.64s as asked\n",
			peer_client ? peer_client->name : "(null)");
		goto fail;
	}
	for (i = 0; i < HCA_SLOTS && !c; i++)
		if (!slots[i].used)
			c = &slots[i];
	if (!c || !peer_client) {
		hca_error("register: %s", c ? "NULL client" : "more clients than the harness has slots");
		goto fail;
	}
	memset(c, 0, sizeof(*c));
	c->slot = c - slots;
	for (i = 0; i < HCA_LEDGER && !c->ledger; i++)
		if (!ledger[i].name[0] || !strcmp(ledger[i].name, peer_client->name))
			c->ledger = &ledger[i];
	if (!c->ledger) {
		hca_error("register: more client names than the ledger has entries");
		goto fail;
	}
	strscpy(c->ledger->name, peer_client->name, sizeof(c->ledger->name));
	c->orig = peer_client;
	/* The whole client_ex when the client says it is new-style (the core
	 * reads ex_size and flags only then), else the bare client. */
	if (peer_client->version[IB_PEER_MEMORY_VER_MAX - 1])
		c->shadow = *container_of(peer_client, const struct peer_memory_client_ex, client);
	else
		c->shadow.client = *peer_client;
	c->shadow.client.acquire = peer_client->acquire ? slot_ops[c->slot].acquire : NULL;
	c->shadow.client.get_pages = peer_client->get_pages ? slot_ops[c->slot].get_pages : NULL;
	c->shadow.client.dma_map = peer_client->dma_map ? slot_ops[c->slot].dma_map : NULL;
	c->shadow.client.dma_unmap = peer_client->dma_unmap ? slot_ops[c->slot].dma_unmap : NULL;
	c->shadow.client.put_pages = peer_client->put_pages ? slot_ops[c->slot].put_pages : NULL;
	c->shadow.client.get_page_size =
		peer_client->get_page_size ? slot_ops[c->slot].get_page_size : NULL;
	c->shadow.client.release = peer_client->release ? slot_ops[c->slot].release : NULL;

	strscpy(c->info.name, peer_client->name, sizeof(c->info.name));
	memcpy(c->info.version, peer_client->version, sizeof(c->info.version));
	c->info.new_style = peer_client->version[IB_PEER_MEMORY_VER_MAX - 1] != 0;
	if (c->info.new_style) {
		c->info.ex_size = c->shadow.ex_size;
		if (c->shadow.ex_size >= offsetofend(struct peer_memory_client_ex, flags))
			c->info.flags = c->shadow.flags;
	}
	c->info.invalidation = invalidate_callback != NULL;

	handle = mofed_ib_register_peer_memory_client(&c->shadow.client,
						      invalidate_callback ? &c->core_invalidate : NULL);
	if (!handle)
		goto fail;
	c->core_handle = handle;
	if (invalidate_callback) {
		c->client_slot = invalidate_callback;
		*invalidate_callback = slot_invalidate[c->slot];
	}
	c->used = true;
	pr_info("mofed_peer_core: registered %s (%s, ex_size %zu, flags %#x, %s)\n", c->info.name,
		c->info.new_style ? "new-style" : "legacy", c->info.ex_size, c->info.flags,
		c->info.invalidation ? "with invalidation" : "no invalidation");
	mutex_unlock(&hca_reg_lock);
	/* The handle the client gets is ours, so unregister finds the slot. */
	return c;
fail:
	mutex_unlock(&hca_reg_lock);
	return NULL;
}
EXPORT_SYMBOL(ib_register_peer_memory_client);

void ib_unregister_peer_memory_client(void *reg_handle)
{
	struct pcd_client *c = reg_handle;
	long users;

	mutex_lock(&hca_reg_lock);
	spin_lock(&hca_lock);
	st.unregistrations++;
	spin_unlock(&hca_lock);
	if (c < slots || c >= slots + HCA_SLOTS || !c->used) {
		hca_error("unregister of an unknown handle %px (double unregister?)", reg_handle);
		mutex_unlock(&hca_reg_lock);
		return;
	}
	spin_lock(&hca_lock);
	users = c->ledger->counts.contexts_live;
	spin_unlock(&hca_lock);
	if (users)	/* the real core now waits for them, forever if none comes */
		hca_error("unregister of %s with %ld contexts alive (the core waits for them)",
			  c->info.name, users);
	mutex_unlock(&hca_reg_lock);
	mofed_ib_unregister_peer_memory_client(c->core_handle);
	mutex_lock(&hca_reg_lock);
	pr_info("mofed_peer_core: unregistered %s\n", c->info.name);
	c->used = false;
	mutex_unlock(&hca_reg_lock);
}
EXPORT_SYMBOL(ib_unregister_peer_memory_client);

/* ------------------------------------------------------ the HCA driver */

/* mlx5's invalidation function: the HCA stops DMA to the range. */
static void hca_invalidate_umem(struct ib_umem *umem, void *priv)
{
	struct pcd_umem *u = priv;

	u->hca_stops++;
}

static void pcd_umem_free(struct kref *kref)
{
	struct pcd_umem *u = container_of(kref, struct pcd_umem, kref);

	kfree(u);
	spin_lock(&hca_lock);
	st.umems_live--;
	spin_unlock(&hca_lock);
}

int pcd_umem_get(unsigned long addr, size_t size, bool inval_supp,
		 const char *client, struct pcd_umem **out)
{
	struct ib_umem *old, *umem;
	struct ib_umem_peer *umem_p;
	struct pcd_umem *u;
	int i;

	u = kzalloc(sizeof(*u), GFP_KERNEL);
	old = kzalloc(sizeof(*old), GFP_KERNEL);
	if (!u || !old) {
		kfree(u);
		kfree(old);
		return -ENOMEM;
	}
	kref_init(&u->kref);
	INIT_LIST_HEAD(&u->node);
	u->addr = addr;
	u->size = size;
	u->xa_id = PCD_NO_INVALIDATION_ID;
	spin_lock(&hca_lock);
	st.umems_live++;
	spin_unlock(&hca_lock);

	/* What ib_umem_get() fills before it asks the peer clients. */
	old->ibdev = &hca_ibdev;
	old->owning_mm = current->mm;
	mmgrab(old->owning_mm);
	old->address = addr;
	old->length = size;
	old->iova = addr;
	old->writable = 1;
	atomic64_add(ib_umem_num_pages(old), &old->owning_mm->pinned_vm);

	if (client) {
		mutex_lock(&hca_get_lock);
		hca_only_client = client;
		WRITE_ONCE(hca_only_task, current);
	}
	umem = ib_peer_umem_get(old, -ENXIO, inval_supp ? IB_PEER_MEM_INVAL_SUPP : 0);
	if (client) {
		WRITE_ONCE(hca_only_task, NULL);
		hca_only_client = NULL;
		mutex_unlock(&hca_get_lock);
	}
	if (IS_ERR(umem)) {
		/* as ib_umem_get()'s error path: undo what it did */
		atomic64_sub(ib_umem_num_pages(old), &old->owning_mm->pinned_vm);
		mmdrop(old->owning_mm);
		kfree(old);
		kref_put(&u->kref, pcd_umem_free);
		return PTR_ERR(umem);
	}
	umem_p = container_of(umem, struct ib_umem_peer, umem);
	u->umem = umem;
	u->client_ctx = umem_p->peer_client_context;
	u->xa_id = umem_p->xa_id;
	u->sgt = umem->sgt_append.sgt;
	u->nmap = umem->sgt_append.sgt.nents;
	for (i = 0; i < HCA_SLOTS; i++)
		if (slots[i].used && slots[i].core_handle == umem_p->ib_peer_client)
			u->client = &slots[i];
	spin_lock(&hca_lock);
	list_add_tail(&u->node, &hca_umems);
	spin_unlock(&hca_lock);
	/* mlx5 creates the MR here, then lets invalidations in. */
	if (u->xa_id != PCD_NO_INVALIDATION_ID) {
		ib_umem_activate_invalidation_notifier(umem, hca_invalidate_umem, u);
		u->activated = true;
	}
	*out = u;
	return 0;
}
EXPORT_SYMBOL_GPL(pcd_umem_get);

void pcd_umem_release(struct pcd_umem *u)
{
	struct ib_umem_peer *umem_p = container_of(u->umem, struct ib_umem_peer, umem);

	if (u->activated) {
		if (!mutex_trylock(&umem_p->mapping_lock))
			u->lock_contended++;
		else
			mutex_unlock(&umem_p->mapping_lock);
		ib_umem_stop_invalidation_notifier(u->umem);
	}
	ib_peer_umem_release(u->umem);
	spin_lock(&hca_lock);
	/* The core unmaps a mapped registration (dma_unmap + put_pages) once,
	 * at teardown or inside an invalidation, unless the client unmapped it
	 * itself: an invalidated registration of a PEER_MEM_INVALIDATE_UNMAPS
	 * client (peer_mem.c). The ledger counts that as given back; what the
	 * client really freed, the NVIDIA double's and the sg counts show. */
	if (!u->teardown_unmaps && !u->inval_unmaps) {
		u->client->ledger->counts.mapped_live--;
		u->client->ledger->counts.pinned_live--;
	}
	list_del_init(&u->node);
	spin_unlock(&hca_lock);
	u->umem = NULL;
	kref_put(&u->kref, pcd_umem_free);
}
EXPORT_SYMBOL_GPL(pcd_umem_release);

/* The registration's state as the core sees it. */
enum pcd_umem_state pcd_umem_state(struct pcd_umem *u)
{
	struct ib_umem_peer *umem_p;

	if (!u->umem)
		return PCD_UNMAPPED;
	umem_p = container_of(u->umem, struct ib_umem_peer, umem);
	switch (READ_ONCE(umem_p->mapped_state)) {
	case UMEM_PEER_MAPPED:
		return PCD_MAPPED;
	case UMEM_PEER_INVALIDATED:
		return PCD_INVALIDATED;
	default:
		return PCD_UNMAPPED;
	}
}
EXPORT_SYMBOL_GPL(pcd_umem_state);

static struct pcd_client *find_name(const char *name)
{
	int i;

	for (i = 0; i < HCA_SLOTS; i++)
		if (slots[i].used && !strcmp(slots[i].info.name, name))
			return &slots[i];
	return NULL;
}

int pcd_client_acquire(const char *client, unsigned long addr, size_t size, void **ctx)
{
	struct pcd_client *c;
	int ret = -ENOENT;

	mutex_lock(&hca_reg_lock);
	c = find_name(client);
	if (c)
		ret = c->shadow.client.acquire(addr, size, NULL, NULL, ctx);
	mutex_unlock(&hca_reg_lock);
	return ret;
}
EXPORT_SYMBOL_GPL(pcd_client_acquire);

void pcd_client_release(const char *client, void *ctx)
{
	struct pcd_client *c;

	mutex_lock(&hca_reg_lock);
	c = find_name(client);
	if (c)
		c->shadow.client.release(ctx);
	mutex_unlock(&hca_reg_lock);
}
EXPORT_SYMBOL_GPL(pcd_client_release);

/*
 * Test hook: acquire, get_pages (which the scenario makes fail), then
 * dma_map regardless, which the core never does: a client that kept the
 * page-table pointer a failed nvidia_p2p_get_pages left behind (535 frees
 * that table without clearing the caller's slot) hands it to the driver
 * here. Undoes whatever succeeded. 0, or -ENXIO when not acquired.
 */
int pcd_client_dma_map_after_failed_get_pages(const char *client, unsigned long addr, size_t size,
					      int *get_ret, int *map_ret)
{
	struct sg_table sg = {};
	struct pcd_client *c;
	void *ctx = NULL;
	int nmap = 0, ret = -ENOENT;

	mutex_lock(&hca_reg_lock);
	c = find_name(client);
	if (c) {
		ret = c->shadow.client.acquire(addr, size, NULL, NULL, &ctx);
		if (ret == 1) {
			struct peer_memory_client *cl = &c->shadow.client;

			*get_ret = cl->get_pages(addr, size, 1, 0, &sg, ctx, 0);
			*map_ret = cl->dma_map(&sg, ctx, pcd_dma_device(), 0, &nmap);
			if (!*map_ret)
				cl->dma_unmap(&sg, ctx, pcd_dma_device());
			if (!*get_ret)
				cl->put_pages(&sg, ctx);
			cl->release(ctx);
			ret = 0;
		} else {
			ret = -ENXIO;
		}
	}
	mutex_unlock(&hca_reg_lock);
	return ret;
}
EXPORT_SYMBOL_GPL(pcd_client_dma_map_after_failed_get_pages);

unsigned long pcd_umem_page_size(struct pcd_umem *u)
{
	return u->client->shadow.client.get_page_size(u->client_ctx);
}
EXPORT_SYMBOL_GPL(pcd_umem_page_size);

const char *pcd_umem_client_name(struct pcd_umem *u)
{
	return u->client ? u->client->info.name : "(unknown)";
}
EXPORT_SYMBOL_GPL(pcd_umem_client_name);

int pcd_clients(struct pcd_client_info *out, int max)
{
	int i, n = 0;

	mutex_lock(&hca_reg_lock);
	for (i = 0; i < HCA_SLOTS; i++) {
		struct pcd_client *c = &slots[i];

		if (!c->used)
			continue;
		if (n < max) {
			out[n] = c->info;
			/* the client must still hold the callback it was given */
			out[n].slot_filled = c->client_slot && *c->client_slot == slot_invalidate[i];
		}
		n++;
	}
	mutex_unlock(&hca_reg_lock);
	return n;
}
EXPORT_SYMBOL_GPL(pcd_clients);

int pcd_ledger(struct pcd_ledger_entry *out, int max)
{
	int i, n = 0;

	mutex_lock(&hca_reg_lock);
	for (i = 0; i < HCA_LEDGER && n < max; i++) {
		if (!ledger[i].name[0])
			continue;
		spin_lock(&hca_lock);
		out[n] = ledger[i];
		spin_unlock(&hca_lock);
		out[n].counts.sg_live = atomic_long_read(&ledger_sg_live[i]);
		out[n].sg_tracked = READ_ONCE(sg_probe_armed);
		n++;
	}
	mutex_unlock(&hca_reg_lock);
	return n;
}
EXPORT_SYMBOL_GPL(pcd_ledger);

int pcd_client_counts(const char *client, struct pcd_client_counts *out)
{
	struct pcd_client *c;
	int ret = -ENOENT;

	mutex_lock(&hca_reg_lock);
	c = find_name(client);
	if (c) {
		spin_lock(&hca_lock);
		*out = c->ledger->counts;
		spin_unlock(&hca_lock);
		ret = 0;
	}
	mutex_unlock(&hca_reg_lock);
	return ret;
}
EXPORT_SYMBOL_GPL(pcd_client_counts);

void pcd_get_stats(struct pcd_stats *out)
{
	int i;

	mutex_lock(&hca_reg_lock);
	spin_lock(&hca_lock);
	*out = st;
	spin_unlock(&hca_lock);
	out->clients_live = 0;
	for (i = 0; i < HCA_SLOTS; i++)
		out->clients_live += slots[i].used;
	mutex_unlock(&hca_reg_lock);
}
EXPORT_SYMBOL_GPL(pcd_get_stats);

long pcd_reset_errors(void)
{
	long n;

	spin_lock(&hca_lock);
	n = st.errors;
	st.errors = 0;
	st.first_error[0] = 0;
	spin_unlock(&hca_lock);
	return n;
}
EXPORT_SYMBOL_GPL(pcd_reset_errors);

void pcd_umem_hold(struct pcd_umem *u)
{
	kref_get(&u->kref);
}
EXPORT_SYMBOL_GPL(pcd_umem_hold);

void pcd_umem_put(struct pcd_umem *u)
{
	kref_put(&u->kref, pcd_umem_free);
}
EXPORT_SYMBOL_GPL(pcd_umem_put);

void pcd_fail_register_nth(long nth)
{
	mutex_lock(&hca_reg_lock);
	hca_fail_register = nth;
	mutex_unlock(&hca_reg_lock);
}
EXPORT_SYMBOL_GPL(pcd_fail_register_nth);

struct device *pcd_dma_device(void)
{
	return &hca_pdev.dev;
}
EXPORT_SYMBOL_GPL(pcd_dma_device);

static int __init hca_init(void)
{
	int ret = register_kprobe(&sg_free_probe);

	/* without it the ledger cannot see sg tables freed: pcd_ledger says
	 * so and the closing check fails rather than pass blind */
	if (ret)
		pr_err("mofed_peer_core: kprobe on sg_free_table: %d; sg tables not accounted\n", ret);
	else
		sg_probe_armed = true;
	pr_info("mofed_peer_core: MLNX_OFED peer_mem.c and the test HCA ready\n");
	return 0;
}

static void __exit hca_exit(void)
{
	if (sg_probe_armed)
		unregister_kprobe(&sg_free_probe);
	xa_destroy(&sg_live);
	if (st.umems_live)
		pr_err("mofed_peer_core: unloading with %ld registrations alive\n", st.umems_live);
	pr_info("mofed_peer_core: unloaded, %ld contract violations\n", st.errors);
}

module_init(hca_init);
module_exit(hca_exit);
