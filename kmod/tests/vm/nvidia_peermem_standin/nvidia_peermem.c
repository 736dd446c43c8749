// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * A module named nvidia_peermem and nothing more: nv_peer_mem.service
 * refuses to load nv_peer_mem while a module of that name is loaded
 * (/sys/module/nvidia_peermem), since NVIDIA's own peer memory client and
 * nv_peer_mem cannot both serve. The booted-image test (ci/test-image.sh)
 * loads this at boot to see the service refuse; it registers nothing.
 */
#include <linux/module.h>

MODULE_LICENSE("Dual BSD/GPL");
MODULE_DESCRIPTION("Stand-in with the name of NVIDIA's nvidia_peermem (registers nothing), for nv_peer_mem's booted-image test");

static int __init standin_init(void)
{
	return 0;
}

static void __exit standin_exit(void)
{
}

module_init(standin_init);
module_exit(standin_exit);
