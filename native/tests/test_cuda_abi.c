/* test_cuda_abi.c: checks at compile time that gpu_driver.h's CUDA types, struct layouts and constants match cuda.h (built only where cuda.h is found). */
#include <stddef.h>
#include <stdio.h>

#include <cuda.h>

#include "gpu/gpu_driver.h"

#define SAME_SIZE(a, b) _Static_assert(sizeof(a) == sizeof(b), "sizeof " #a " != sizeof " #b)
#define SAME_FIELD(sa, sb, f)                                                         \
    _Static_assert(offsetof(sa, f) == offsetof(sb, f), "offsetof " #sa "." #f);       \
    _Static_assert(sizeof(((sa *)0)->f) == sizeof(((sb *)0)->f), "sizeof " #sa "." #f)
#define SAME_VALUE(a, b) _Static_assert((long long)(a) == (long long)(b), #a " != " #b)

/* ------------------------------------------------------------------ scalar and handle types */

SAME_SIZE(srpc_CUresult, CUresult);
SAME_SIZE(srpc_CUdeviceptr, CUdeviceptr);
_Static_assert((srpc_CUdeviceptr)-1 > 0 && (CUdeviceptr)-1 > 0, "CUdeviceptr is unsigned");
SAME_SIZE(srpc_CUdevice, CUdevice);
SAME_SIZE(srpc_CUmemGenericAllocationHandle, CUmemGenericAllocationHandle);
SAME_SIZE(srpc_CUcontext, CUcontext);
SAME_SIZE(srpc_CUstream, CUstream);
SAME_SIZE(srpc_CUmodule, CUmodule);
SAME_SIZE(srpc_CUfunction, CUfunction);
SAME_SIZE(srpc_CUhostFn, CUhostFn);
SAME_SIZE(int, CUdevice_attribute);
SAME_SIZE(int, CUmemAllocationType);
SAME_SIZE(int, CUmemAllocationHandleType);
SAME_SIZE(int, CUmemLocationType);
SAME_SIZE(int, CUmemAccess_flags);
SAME_SIZE(int, CUmemAllocationGranularity_flags);

/* ------------------------------------------------------------------ structs */

SAME_SIZE(srpc_CUmemLocation, CUmemLocation);
SAME_FIELD(srpc_CUmemLocation, CUmemLocation, type);
SAME_FIELD(srpc_CUmemLocation, CUmemLocation, id);

SAME_SIZE(srpc_CUmemAllocationProp, CUmemAllocationProp);
SAME_FIELD(srpc_CUmemAllocationProp, CUmemAllocationProp, type);
SAME_FIELD(srpc_CUmemAllocationProp, CUmemAllocationProp, requestedHandleTypes);
SAME_FIELD(srpc_CUmemAllocationProp, CUmemAllocationProp, location);
SAME_FIELD(srpc_CUmemAllocationProp, CUmemAllocationProp, location.type);
SAME_FIELD(srpc_CUmemAllocationProp, CUmemAllocationProp, location.id);
SAME_FIELD(srpc_CUmemAllocationProp, CUmemAllocationProp, win32HandleMetaData);
SAME_FIELD(srpc_CUmemAllocationProp, CUmemAllocationProp, allocFlags);
SAME_FIELD(srpc_CUmemAllocationProp, CUmemAllocationProp, allocFlags.compressionType);
SAME_FIELD(srpc_CUmemAllocationProp, CUmemAllocationProp, allocFlags.gpuDirectRDMACapable);
SAME_FIELD(srpc_CUmemAllocationProp, CUmemAllocationProp, allocFlags.usage);
SAME_FIELD(srpc_CUmemAllocationProp, CUmemAllocationProp, allocFlags.reserved);

SAME_SIZE(srpc_CUmemAccessDesc, CUmemAccessDesc);
SAME_FIELD(srpc_CUmemAccessDesc, CUmemAccessDesc, location);
SAME_FIELD(srpc_CUmemAccessDesc, CUmemAccessDesc, location.type);
SAME_FIELD(srpc_CUmemAccessDesc, CUmemAccessDesc, location.id);
SAME_FIELD(srpc_CUmemAccessDesc, CUmemAccessDesc, flags);

/* ------------------------------------------------------------------ constants */

SAME_VALUE(SRPC_CUDA_SUCCESS, CUDA_SUCCESS);
SAME_VALUE(SRPC_CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE);
SAME_VALUE(SRPC_CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_OUT_OF_MEMORY);
SAME_VALUE(SRPC_CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_NOT_INITIALIZED);
SAME_VALUE(SRPC_CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_DEINITIALIZED);
SAME_VALUE(SRPC_CUDA_ERROR_STUB_LIBRARY, CUDA_ERROR_STUB_LIBRARY);
SAME_VALUE(SRPC_CUDA_ERROR_DEVICE_UNAVAILABLE, CUDA_ERROR_DEVICE_UNAVAILABLE);
SAME_VALUE(SRPC_CUDA_ERROR_NO_DEVICE, CUDA_ERROR_NO_DEVICE);
SAME_VALUE(SRPC_CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_DEVICE);
SAME_VALUE(SRPC_CUDA_ERROR_NO_BINARY_FOR_GPU, CUDA_ERROR_NO_BINARY_FOR_GPU);
SAME_VALUE(SRPC_CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_HANDLE);
SAME_VALUE(SRPC_CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
SAME_VALUE(SRPC_CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
SAME_VALUE(SRPC_CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_NOT_SUPPORTED);
SAME_VALUE(SRPC_CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, CUDA_ERROR_SYSTEM_DRIVER_MISMATCH);
SAME_VALUE(SRPC_CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE);

SAME_VALUE(SRPC_CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY);
SAME_VALUE(SRPC_CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
SAME_VALUE(SRPC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
#if CUDA_VERSION >= 12000
SAME_VALUE(SRPC_CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1);
#else
SAME_VALUE(SRPC_CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS);
#endif
SAME_VALUE(SRPC_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
           CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);

SAME_VALUE(SRPC_CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_ALLOCATION_TYPE_PINNED);
SAME_VALUE(SRPC_CU_MEM_HANDLE_TYPE_NONE, CU_MEM_HANDLE_TYPE_NONE);
SAME_VALUE(SRPC_CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_LOCATION_TYPE_DEVICE);
SAME_VALUE(SRPC_CU_MEM_ACCESS_FLAGS_PROT_READWRITE, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
SAME_VALUE(SRPC_CU_MEM_ALLOC_GRANULARITY_MINIMUM, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
SAME_VALUE(SRPC_CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_PORTABLE);
SAME_VALUE(SRPC_CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_DEVICEMAP);
SAME_VALUE(SRPC_CU_MEMHOSTREGISTER_PORTABLE, CU_MEMHOSTREGISTER_PORTABLE);
SAME_VALUE(SRPC_CU_MEMHOSTREGISTER_DEVICEMAP, CU_MEMHOSTREGISTER_DEVICEMAP);
SAME_VALUE(SRPC_CU_STREAM_NON_BLOCKING, CU_STREAM_NON_BLOCKING);
SAME_VALUE(SRPC_CU_STREAM_WRITE_VALUE_DEFAULT, CU_STREAM_WRITE_VALUE_DEFAULT);
SAME_VALUE(SRPC_CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS);

int main(void)
{
    printf("CUDA %d: gpu_driver.h matches cuda.h (checked at compile time)\n", CUDA_VERSION);
    return 0;
}
