/* gpu_info.c: what a device offers (name, versions, compute capability, memory, VMM, stream memory operations, host registration, GPUDirect) and what the kernels were built for, for reports. */
#include <errno.h>
#include <string.h>

#include "gpu/gpu_driver.h"
#include "splitrpc_gpu.h"

#ifndef SPLITRPC_KERNEL_ARCHS
#define SPLITRPC_KERNEL_ARCHS "" /* a build without a CUDA compiler: no kernels */
#endif

const char *srpc_gpu_kernel_archs(void)
{
    return SPLITRPC_KERNEL_ARCHS;
}

/* An attribute of dev, or -1 when the driver does not know it (an older driver). */
static int attr_or_unknown(int attr, srpc_CUdevice dev)
{
    int v = 0;
    return srpc_cu.DeviceGetAttribute(&v, attr, dev) == SRPC_CUDA_SUCCESS ? v : -1;
}

int srpc_gpu_device_info(int device, srpc_gpu_info_t *out)
{
    if (!out)
        return srpc_gpu_failf(-EINVAL, "srpc_gpu_device_info: NULL out");
    memset(out, 0, sizeof(*out));
    int rc = srpc_gpu_use_device(device); /* checks the ordinal; granularity needs the context */
    if (rc)
        return rc;
    if ((rc = srpc_gpu_device_name(device, out->name, sizeof(out->name))))
        return rc;
    srpc_CUresult r = srpc_cu.DriverGetVersion(&out->driver_version);
    if (r != SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuDriverGetVersion", r);
    srpc_CUdevice dev;
    if ((r = srpc_cu.DeviceGet(&dev, device)) != SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuDeviceGet", r);
    if ((r = srpc_cu.DeviceGetAttribute(&out->cc_major, SRPC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)) !=
            SRPC_CUDA_SUCCESS ||
        (r = srpc_cu.DeviceGetAttribute(&out->cc_minor, SRPC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)) !=
            SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuDeviceGetAttribute(COMPUTE_CAPABILITY)", r);
    out->multiprocessors = attr_or_unknown(SRPC_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    size_t total = 0;
    if (srpc_cu.DeviceTotalMem && srpc_cu.DeviceTotalMem(&total, dev) == SRPC_CUDA_SUCCESS)
        out->total_memory = total;
    out->vmm = attr_or_unknown(SRPC_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
    size_t gran = 0;
    if (out->vmm == 1 && srpc_gpu_granularity(device, &gran) == 0)
        out->granularity = gran;
    out->map_host_memory = attr_or_unknown(SRPC_CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, dev);
    out->unified_addressing = attr_or_unknown(SRPC_CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, dev);
    out->host_register = attr_or_unknown(SRPC_CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, dev);
    out->stream_memops = srpc_gpu_memops(device);
    out->memops_v2 = srpc_cu.write_value_v2;
    out->gpudirect_rdma = attr_or_unknown(SRPC_CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, dev);
    out->pci_domain = attr_or_unknown(SRPC_CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev);
    out->pci_bus = attr_or_unknown(SRPC_CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev);
    out->pci_device = attr_or_unknown(SRPC_CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev);
    return 0;
}

int srpc_gpu_mem_info(int device, uint64_t *free_bytes, uint64_t *total_bytes)
{
    if (!free_bytes || !total_bytes)
        return srpc_gpu_failf(-EINVAL, "srpc_gpu_mem_info: NULL out");
    *free_bytes = *total_bytes = 0;
    int rc = srpc_gpu_use_device(device);
    if (rc)
        return rc;
    if (!srpc_cu.MemGetInfo)
        return srpc_gpu_failf(-ENOTSUP, "this CUDA driver has no cuMemGetInfo_v2");
    size_t f = 0, t = 0;
    srpc_CUresult r = srpc_cu.MemGetInfo(&f, &t);
    if (r != SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuMemGetInfo", r);
    *free_bytes = f;
    *total_bytes = t;
    return 0;
}
