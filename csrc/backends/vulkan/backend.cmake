# The Vulkan backend's build rules (included by the top-level CMakeLists.txt). The Vulkan loader is
# never linked: the core dlopens it at run time (VK_NO_PROTOTYPES), so a build with Vulkan still
# runs on machines without any. LOCALLLM_VULKAN: AUTO builds the backend when the Vulkan headers
# and glslc are found, ON requires them, OFF never builds it; the files here then compile under
# LOCALLLM_HAVE_VULKAN.
set(LOCALLLM_VULKAN "AUTO" CACHE STRING "Build the Vulkan backend: AUTO (headers and glslc found), ON, OFF")
set_property(CACHE LOCALLLM_VULKAN PROPERTY STRINGS AUTO ON OFF)

# A machine without glslc (a lent GPU machine's image) can build with the shaders another build
# compiled: its generated spirv_blobs.cpp (tests/vulkan_kit.sh carries it with the headers).
set(LOCALLLM_VULKAN_SPIRV "" CACHE FILEPATH "spirv_blobs.cpp made by a build with glslc (then glslc is not needed)")

set(LOCALLLM_WITH_VULKAN OFF)
if(NOT LOCALLLM_VULKAN STREQUAL "OFF")
  find_path(LOCALLLM_VULKAN_INCLUDE_DIR vulkan/vulkan.h HINTS ENV VULKAN_SDK PATH_SUFFIXES include)
  find_program(LOCALLLM_GLSLC glslc HINTS ENV VULKAN_SDK PATH_SUFFIXES bin)
  if(LOCALLLM_VULKAN_INCLUDE_DIR AND (LOCALLLM_GLSLC OR EXISTS "${LOCALLLM_VULKAN_SPIRV}"))
    set(LOCALLLM_WITH_VULKAN ON)
  elseif(LOCALLLM_VULKAN STREQUAL "ON")
    message(FATAL_ERROR "LOCALLLM_VULKAN=ON but the Vulkan headers (vulkan/vulkan.h: ${LOCALLLM_VULKAN_INCLUDE_DIR}) "
                        "or glslc (${LOCALLLM_GLSLC}) were not found")
  endif()
endif()
message(STATUS "localllm: Vulkan backend ${LOCALLLM_WITH_VULKAN}")
if(LOCALLLM_WITH_VULKAN)
  add_subdirectory(${CMAKE_SOURCE_DIR}/vulkan ${CMAKE_BINARY_DIR}/vulkan)   # the shaders
  # Only this folder's files (host side, product bindings, op harness) see Vulkan.
  file(GLOB_RECURSE vulkan_host_sources ${CMAKE_CURRENT_LIST_DIR}/*.cpp)
  set_property(SOURCE ${vulkan_host_sources} APPEND PROPERTY COMPILE_DEFINITIONS LOCALLLM_HAVE_VULKAN=1)
  if(NOT LOCALLLM_VULKAN_INCLUDE_DIR IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)   # e.g. an SDK's
    set_property(SOURCE ${vulkan_host_sources} APPEND PROPERTY INCLUDE_DIRECTORIES ${LOCALLLM_VULKAN_INCLUDE_DIR})
  endif()
  # Vulkan structs are written `VkFooInfo info{VK_STRUCTURE_TYPE_FOO_INFO};`: the members not named
  # are zero, which is what the API wants, and what GCC's -Wextra would flag on every one.
  set_property(SOURCE ${vulkan_host_sources} APPEND PROPERTY COMPILE_OPTIONS -Wno-missing-field-initializers)
  target_link_libraries(localllm_core PUBLIC ${CMAKE_DL_LIBS})
endif()

