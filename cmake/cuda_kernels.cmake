# cuda_kernels.cmake: compiles native/cuda/kernels.cu to a fatbin with the CUDA compiler (no CUDA language, no cudart) and embeds it as a C source; sets SPLITRPC_KERNELS_SRC.
if(SPLITRPC_HAVE_CUDA)
  # SASS for Ampere and Hopper, and compute_90 PTX that newer GPUs compile at load time.
  set(SPLITRPC_CUDA_GENCODE
      -gencode arch=compute_80,code=sm_80
      -gencode arch=compute_90,code=sm_90
      -gencode arch=compute_90,code=compute_90)
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
    DEPENDS native/cuda/kernels.cu native/src/gpu/o2_abi.h native/include/splitrpc_gpu.h
    COMMENT "Compiling the CUDA kernels to a fatbin (sm_80, sm_90, compute_90 PTX)"
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
