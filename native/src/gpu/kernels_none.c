/* kernels_none.c: the empty kernel fatbin of a build without a CUDA compiler (GPU kernels report -ENOTSUP). */
#include <stddef.h>

#include "gpu/gpu_kernels.h"

const unsigned char srpc_kernels_fatbin[1] = {0};
const size_t srpc_kernels_fatbin_size = 0;
