// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * NCCL's own test of whether a peer memory client serves GPU memory, run in
 * the guest: NCCL's ibGdrSupportInitOnce() sets ncclIbGdrModuleLoaded when
 * KNL_MODULE_LOADED(path), defined as ((access(a, F_OK) == -1) ? 0 : 1),
 * holds for one of its paths (NCCL 2.28.9 src/transport/net_ib.cc:868-875;
 * 2.30.7 src/transport/net_ib/gdr.cc:14-21). The paths are the arguments:
 * the host takes them from NCCL's own source (xtask/src/vm/nccl_probe.rs).
 * Prints "<KNL_MODULE_LOADED> <path>" per path.
 */
#include <stdio.h>
#include <unistd.h>

#define KNL_MODULE_LOADED(a) ((access(a, F_OK) == -1) ? 0 : 1)

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		printf("%d %s\n", KNL_MODULE_LOADED(argv[i]), argv[i]);
	return 0;
}
