# features.cmake: detects the optional CUDA and DPDK toolchains and says what gets compiled in.
set(SPLITRPC_FEATURE_DEFS "")
set(SPLITRPC_HAVE_CUDA OFF)
set(SPLITRPC_HAVE_DPDK OFF)

# The native core has no CUDA or DPDK sources yet (they come with the GPU and DPDK data
# paths), so detection only reports what it found; nothing is claimed as compiled in.
if(NOT SPLITRPC_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    message(STATUS "splitrpc: CUDA toolkit found (${CMAKE_CUDA_COMPILER}); no CUDA sources to build yet")
  elseif(SPLITRPC_CUDA STREQUAL "ON")
    message(FATAL_ERROR "SPLITRPC_CUDA=ON but no CUDA compiler was found")
  endif()
endif()

if(NOT SPLITRPC_DPDK STREQUAL "OFF")
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(LIBDPDK QUIET libdpdk)
  endif()
  if(LIBDPDK_FOUND)
    message(STATUS "splitrpc: libdpdk ${LIBDPDK_VERSION} found; no DPDK sources to build yet")
  elseif(SPLITRPC_DPDK STREQUAL "ON")
    message(FATAL_ERROR "SPLITRPC_DPDK=ON but libdpdk was not found by pkg-config")
  endif()
endif()
