// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * nvpm_bench.ko: times the full registration lifecycle through MLNX_OFED's
 * real PeerDirect core (mofed_peer_core.ko's HCA driver: the core asks the
 * registered clients, then get_pages, dma_map, activate the invalidation
 * notifier; teardown stops it, dma_unmap, put_pages, release) against the
 * NVIDIA double, for whichever peer memory client is loaded (nv_peer_mem or
 * nvidia-peermem), so that the guest can run the same loop against each.
 *
 *   echo "lifecycle PAGES ITERATIONS" > /sys/kernel/debug/nvpm_bench/ctl
 *   cat /sys/kernel/debug/nvpm_bench/result
 *     -> "PAGES ITERATIONS TOTAL_NS CLIENT" or "FAIL why"
 *
 * The range is PAGES GPU pages of 64 KiB, registered whole. The figures
 * include the doubles and the core and are taken under TCG with
 * slub_debug: they compare clients with each other, nothing more.
 */
#include <linux/debugfs.h>
#include <linux/kernel.h>
#include <linux/ktime.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/uaccess.h>

#include "nv-p2p.h"
#include "nvpm_doubles.h"

MODULE_LICENSE("Dual BSD/GPL");
MODULE_DESCRIPTION("nv_peer_mem VM tests: registration lifecycle benchmark");

static char result[128];
static DEFINE_MUTEX(bench_lock);

static int lifecycle(long pages, long iters)
{
	struct pcd_umem *u;
	char client[64] = "";
	size_t size;
	u64 va, t0, dt;
	long i;
	int ret = 0;

	/* 1 GiB of 64 KiB pages is 16384: room for that and a little more */
	if (pages < 1 || pages > 32768 || iters < 1 || iters > 1000000) {
		snprintf(result, sizeof(result), "FAIL bad arguments (pages 1..32768, iterations 1..1000000)");
		return -EINVAL;
	}
	size = pages * NVD_GPU_PAGE_SIZE;
	va = nvd_alloc(0, size, NVIDIA_P2P_PAGE_SIZE_64KB);
	if (!va) {
		snprintf(result, sizeof(result), "FAIL cannot allocate %ld pages of simulated GPU memory", pages);
		return -ENOMEM;
	}
	t0 = ktime_get_ns();
	for (i = 0; i < iters; i++) {
		ret = pcd_umem_get(va, size, true, NULL, &u);
		if (ret)
			break;
		if (!i)
			strscpy(client, pcd_umem_client_name(u), sizeof(client));
		pcd_umem_release(u);
		cond_resched();
	}
	dt = ktime_get_ns() - t0;
	nvd_free(va);
	if (ret) {
		snprintf(result, sizeof(result), "FAIL iteration %ld: registration failed: %d", i, ret);
		return ret;
	}
	snprintf(result, sizeof(result), "%ld %ld %llu %s", pages, iters, dt, client);
	return 0;
}

static ssize_t ctl_write(struct file *f, const char __user *buf, size_t len, loff_t *pos)
{
	char cmd[64];
	long pages, iters;
	int ret;

	if (len >= sizeof(cmd))
		return -EINVAL;
	if (copy_from_user(cmd, buf, len))
		return -EFAULT;
	cmd[len] = 0;
	mutex_lock(&bench_lock);
	if (sscanf(cmd, "lifecycle %ld %ld", &pages, &iters) == 2) {
		ret = lifecycle(pages, iters);
	} else {
		snprintf(result, sizeof(result), "FAIL unknown command (want: lifecycle PAGES ITERATIONS)");
		ret = -EINVAL;
	}
	mutex_unlock(&bench_lock);
	return ret ? ret : len;
}

static ssize_t result_read(struct file *f, char __user *buf, size_t len, loff_t *pos)
{
	ssize_t n;

	mutex_lock(&bench_lock);
	n = simple_read_from_buffer(buf, len, pos, result, strlen(result));
	mutex_unlock(&bench_lock);
	return n;
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

static int __init nvpm_bench_init(void)
{
	dir = debugfs_create_dir("nvpm_bench", NULL);
	debugfs_create_file("ctl", 0200, dir, NULL, &ctl_fops);
	debugfs_create_file("result", 0400, dir, NULL, &result_fops);
	return 0;
}

static void __exit nvpm_bench_exit(void)
{
	debugfs_remove_recursive(dir);
}

module_init(nvpm_bench_init);
module_exit(nvpm_bench_exit);
