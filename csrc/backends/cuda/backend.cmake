# The CUDA backend's build rules (included by the top-level CMakeLists.txt). CUDA never is a
# requirement of the CPU build: the kernels in cuda/ are built when nvcc is found
# (LOCALLLM_CUDA=AUTO) or demanded (ON); the files here then compile under LOCALLLM_HAVE_CUDA.
set(LOCALLLM_CUDA "AUTO" CACHE STRING "Build the CUDA kernels in cuda/: AUTO (when nvcc is found), ON, OFF")
set_property(CACHE LOCALLLM_CUDA PROPERTY STRINGS AUTO ON OFF)
set(LOCALLLM_WITH_CUDA OFF)
if(NOT LOCALLLM_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(LOCALLLM_WITH_CUDA ON)
  elseif(LOCALLLM_CUDA STREQUAL "ON")
    message(FATAL_ERROR "LOCALLLM_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()
if(LOCALLLM_WITH_CUDA)
  add_subdirectory(${CMAKE_SOURCE_DIR}/cuda ${CMAKE_BINARY_DIR}/cuda)
  target_link_libraries(localllm_core PUBLIC localllm_cuda)
  # The CUDA backend (backend_cuda.cpp), its registry entry's device queries (register.cpp), its
  # error types (bind_cuda.cpp) and op harness (harness/bind_cuda_ops.cpp).
  target_compile_definitions(localllm_core PUBLIC LOCALLLM_HAVE_CUDA=1)
endif()
message(STATUS "localllm: CUDA kernels ${LOCALLLM_WITH_CUDA}")
