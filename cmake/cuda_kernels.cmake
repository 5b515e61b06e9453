# cuda_kernels.cmake: compiles native/cuda/kernels.cu to a fatbin with the CUDA compiler (no CUDA language, no cudart) and embeds it as a C source; sets SPLITRPC_KERNELS_SRC.
# SPLITRPC_CUDA_ARCHS: machine code (SASS) for each listed architecture, and PTX of the last,
# which newer GPUs compile at load time. Default: Ampere and Hopper (sm_80, sm_90, compute_90);
# a build for one machine names its own (bench/gpu/run.sh: the GPU's compute capability, e.g. 90).
set(SPLITRPC_CUDA_ARCHS "80;90" CACHE STRING "GPU architectures of the CUDA kernels, e.g. 80;90 (PTX of the last too)")
if(SPLITRPC_HAVE_CUDA)
  set(SPLITRPC_CUDA_GENCODE "")
  set(_archs_text "")
  set(_last "")
  foreach(_a IN LISTS SPLITRPC_CUDA_ARCHS)
    if(NOT _a MATCHES "^[0-9]+[a-z]?$")
      message(FATAL_ERROR "SPLITRPC_CUDA_ARCHS: '${_a}' is not an architecture number such as 90 (or 90a)")
    endif()
    list(APPEND SPLITRPC_CUDA_GENCODE -gencode arch=compute_${_a},code=sm_${_a})
    string(APPEND _archs_text "sm_${_a} ")
    set(_last ${_a})
  endforeach()
  if(_last STREQUAL "")
    message(FATAL_ERROR "SPLITRPC_CUDA_ARCHS is empty")
  endif()
  list(APPEND SPLITRPC_CUDA_GENCODE -gencode arch=compute_${_last},code=compute_${_last})
  string(APPEND _archs_text "compute_${_last}")
  # What srpc_gpu_kernel_archs() reports (native/src/gpu/gpu_info.c).
  list(APPEND SPLITRPC_FEATURE_DEFS "SPLITRPC_KERNEL_ARCHS=\"${_archs_text}\"")
  set(_ccbin "")
  if(CMAKE_CUDA_HOST_COMPILER)
    set(_ccbin -ccbin "${CMAKE_CUDA_HOST_COMPILER}")
  endif()
  set(_fatbin ${CMAKE_CURRENT_BINARY_DIR}/splitrpc_kernels.fatbin)
  set(_fatbin_c ${CMAKE_CURRENT_BINARY_DIR}/splitrpc_kernels_fatbin.c)
  add_custom_command(
    OUTPUT ${_fatbin}
    COMMAND ${CMAKE_CUDA_COMPILER} --fatbin -O3 ${_ccbin} ${SPLITRPC_CUDA_GENCODE}
            -I${CMAKE_CURRENT_SOURCE_DIR}/native/src -I${CMAKE_CURRENT_SOURCE_DIR}/native/include
            -o ${_fatbin} ${CMAKE_CURRENT_SOURCE_DIR}/native/cuda/kernels.cu
    DEPENDS native/cuda/kernels.cu native/cuda/embed_cache.cuh native/src/gpu/o2_abi.h native/src/gpu/mirror_word.h
            native/src/embed/emb_gpu_abi.h native/src/core/mix64.h native/include/splitrpc_gpu.h
    COMMENT "Compiling the CUDA kernels to a fatbin (${_archs_text})"
    VERBATIM)
  add_custom_command(
    OUTPUT ${_fatbin_c}
    COMMAND ${CMAKE_COMMAND} -DINPUT=${_fatbin} -DOUTPUT=${_fatbin_c} -DSYMBOL=srpc_kernels_fatbin
            -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/embed_file.cmake
    DEPENDS ${_fatbin} cmake/embed_file.cmake
    COMMENT "Embedding the kernel fatbin as C source"
    VERBATIM)
  set(SPLITRPC_KERNELS_SRC ${_fatbin_c})
else()
  set(SPLITRPC_KERNELS_SRC native/src/gpu/kernels_none.c)
endif()
