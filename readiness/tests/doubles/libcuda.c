/*
 * A double of the CUDA driver library (libcuda.so.1) for the check's
 * --cuda-attributes child (readiness/src/cuda.rs): the five driver calls it
 * makes, with the signatures and CUresult codes of CUDA 12.4's cuda.h.
 *
 * Fidelity: the node's GPUs and their CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED
 * (116) come from the file $LIBCUDA_DOUBLE names, one "BUSID VALUE" line
 * per GPU in CUDA's device order, BUSID as cuDeviceGetPCIBusId prints it
 * (on the lent hosts: readiness/tests/real/README.md). Without the file,
 * cuInit fails with CUDA_ERROR_NO_DEVICE (100), as on a machine without a
 * GPU; a call before cuInit succeeded is CUDA_ERROR_NOT_INITIALIZED (3).
 * Any other attribute, or an ordinal out of range, is
 * CUDA_ERROR_INVALID_VALUE (1). The driver's other work (contexts, memory)
 * is not stood in for: the child never asks for it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GPUS 16
static char bus[MAX_GPUS][32];
static int gdr[MAX_GPUS];
static int count = -1;

int cuInit(unsigned int flags) {
    (void)flags;
    const char *name = getenv("LIBCUDA_DOUBLE");
    FILE *f = name ? fopen(name, "r") : NULL;
    if (!f) return 100;
    count = 0;
    while (count < MAX_GPUS && fscanf(f, "%31s %d", bus[count], &gdr[count]) == 2) count++;
    fclose(f);
    return 0;
}

int cuDeviceGetCount(int *n) {
    if (count < 0) return 3;
    *n = count;
    return 0;
}

int cuDeviceGet(int *device, int ordinal) {
    if (count < 0) return 3;
    if (ordinal < 0 || ordinal >= count) return 1;
    *device = ordinal;
    return 0;
}

int cuDeviceGetAttribute(int *value, int attribute, int device) {
    if (count < 0) return 3;
    if (device < 0 || device >= count || attribute != 116) return 1;
    *value = gdr[device];
    return 0;
}

int cuDeviceGetPCIBusId(char *out, int len, int device) {
    if (count < 0) return 3;
    if (device < 0 || device >= count || len < 1) return 1;
    snprintf(out, (size_t)len, "%s", bus[device]);
    return 0;
}
