# features.cmake: detects the optional CUDA compiler, cuda.h and DPDK, and says what gets compiled in.
set(SPLITRPC_FEATURE_DEFS "")
set(SPLITRPC_HAVE_CUDA OFF)
set(SPLITRPC_HAVE_DPDK OFF)
set(SPLITRPC_DPDK_SRC native/src/dpdk/dpdk_none.c) # the DPDK entry points answer -ENOTSUP

# CUDA: the driver is always loaded at run time (dlopen), so the GPU data path is compiled
# everywhere. Only the kernels (native/cuda/kernels.cu) need the CUDA compiler: with it they
# are built into a fatbin and embedded (SPLITRPC_HAVE_CUDA, SRPC_FEATURE_CUDA); without it
# the library gets an empty fatbin and the GPU kernels answer -ENOTSUP.
if(NOT SPLITRPC_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  set(_nvcc_version "")
  if(CMAKE_CUDA_COMPILER)
    # sm_90 (cmake/cuda_kernels.cmake) needs CUDA 11.8 or later.
    execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --version OUTPUT_VARIABLE _nvcc_out
                    RESULT_VARIABLE _nvcc_rc ERROR_QUIET)
    if(_nvcc_rc EQUAL 0 AND _nvcc_out MATCHES "release ([0-9]+\\.[0-9]+)")
      set(_nvcc_version ${CMAKE_MATCH_1})
    endif()
  endif()
  if(CMAKE_CUDA_COMPILER AND _nvcc_version VERSION_GREATER_EQUAL 11.8)
    set(SPLITRPC_HAVE_CUDA ON)
    list(APPEND SPLITRPC_FEATURE_DEFS SPLITRPC_HAVE_CUDA)
    message(STATUS "splitrpc: CUDA compiler ${CMAKE_CUDA_COMPILER} (${_nvcc_version}): the GPU kernels are compiled in")
  elseif(SPLITRPC_CUDA STREQUAL "ON")
    message(FATAL_ERROR "SPLITRPC_CUDA=ON but no CUDA compiler of release 11.8 or later was found "
                        "(${CMAKE_CUDA_COMPILER} ${_nvcc_version})")
  else()
    message(STATUS "splitrpc: no CUDA compiler of release 11.8 or later: the GPU kernels are not compiled in")
  endif()
endif()

# cuda.h, only for the test that checks the library's own CUDA declarations against it.
if(SPLITRPC_TESTS)
  find_package(CUDAToolkit QUIET)
  find_path(SPLITRPC_CUDA_H_DIR cuda.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATHS /usr/local/cuda/include
            DOC "Directory of cuda.h (for the CUDA ABI test only)")
endif()

if(NOT SPLITRPC_DPDK STREQUAL "OFF")
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(LIBDPDK QUIET libdpdk)
  endif()
  if(LIBDPDK_FOUND)
    set(SPLITRPC_HAVE_DPDK ON)
    list(APPEND SPLITRPC_FEATURE_DEFS SPLITRPC_HAVE_DPDK)
    set(SPLITRPC_DPDK_SRC native/src/dpdk/dpdk_eal.c native/src/dpdk/transport_dpdk.c
                          native/src/dpdk/dpdk_port.c native/src/dpdk/dpdk_rx.c native/src/dpdk/dpdk_tx.c
                          native/src/dpdk/dpdk_payload_pool.c native/src/dpdk/dpdk_split_emulation.c)
    # DPDK's flags (-include rte_config.h, -march) apply to its sources only, not to the core.
    set_source_files_properties(${SPLITRPC_DPDK_SRC} PROPERTIES COMPILE_OPTIONS "${LIBDPDK_CFLAGS}")
    message(STATUS "splitrpc: libdpdk ${LIBDPDK_VERSION} found: the DPDK transport is compiled in")
  elseif(SPLITRPC_DPDK STREQUAL "ON")
    message(FATAL_ERROR "SPLITRPC_DPDK=ON but libdpdk was not found by pkg-config")
  endif()
endif()
