# The portable build (LOCALLLM_PORTABLE=ON, the wheels' build): one binary package for every
# x86-64 CPU from x86-64-v2 (2009's Nehalem) up. The whole core (every csrc/ file) is compiled
# once per variant, each with its own -march, into its own modules under localllm/_variants/<name>/;
# a probe compiled for plain x86-64 (csrc/bindings/probe/) tells the loader
# (python/localllm/_core_variant.py) which variants this CPU and OS run, and it loads the fastest.
#
# Why whole variants rather than only the SIMD files per level: every C++ inline function and
# template a file instantiates (the standard library's included) is emitted in each object that
# uses it and merged by the linker into one copy, which may be the copy compiled for AVX-512
# (SIGILL on an AVX2 CPU). Separate shared objects with hidden symbols cannot share copies, and
# each variant's code is exactly the native build's for that level (FMA contraction in the norms,
# RoPE and softmax included), so its results are bit-identical to a native build on such a CPU.
set(LOCALLLM_VARIANTS "baseline;avx2;avx512" CACHE STRING
    "The portable build's variants (a wheel has all three; a test tree may leave out what its CPU cannot run)")
foreach(variant ${LOCALLLM_VARIANTS})
  if(NOT variant MATCHES "^(baseline|avx2|avx512)$")
    message(FATAL_ERROR "LOCALLLM_VARIANTS: '${variant}' is no variant (baseline, avx2, avx512)")
  endif()
endforeach()
set(LOCALLLM_VARIANT_FLAGS_baseline -march=x86-64-v2)
set(LOCALLLM_VARIANT_FLAGS_avx2 -march=x86-64-v3)   # AVX2 + FMA + F16C + BMI1/2, LZCNT, MOVBE
set(LOCALLLM_VARIANT_FLAGS_avx512 -march=x86-64-v4 -mavx512vnni -mavx512vbmi)   # F/BW/CD/DQ/VL + VNNI + VBMI
message(STATUS "localllm: portable build, core variants ${LOCALLLM_VARIANTS}")

# localllm_core holds the sources and usage requirements (backends included); each variant is a
# copy of it with its -march. It is not compiled itself.
set_target_properties(localllm_core PROPERTIES EXCLUDE_FROM_ALL ON)
set(copied_properties SOURCES INCLUDE_DIRECTORIES INTERFACE_INCLUDE_DIRECTORIES COMPILE_DEFINITIONS
    INTERFACE_COMPILE_DEFINITIONS COMPILE_OPTIONS INTERFACE_COMPILE_OPTIONS LINK_LIBRARIES
    INTERFACE_LINK_LIBRARIES LINK_OPTIONS INTERFACE_LINK_OPTIONS POSITION_INDEPENDENT_CODE
    CXX_VISIBILITY_PRESET VISIBILITY_INLINES_HIDDEN)
get_target_property(core_dependencies localllm_core MANUALLY_ADDED_DEPENDENCIES)
foreach(variant ${LOCALLLM_VARIANTS})
  set(core localllm_core_${variant})
  add_library(${core} OBJECT)
  foreach(property ${copied_properties})
    get_target_property(value localllm_core ${property})
    if(NOT value STREQUAL "value-NOTFOUND")
      set_property(TARGET ${core} PROPERTY ${property} "${value}")
    endif()
  endforeach()
  if(core_dependencies)
    add_dependencies(${core} ${core_dependencies})   # generated sources (Vulkan's SPIR-V blobs)
  endif()
  target_compile_options(${core} PUBLIC ${LOCALLLM_VARIANT_FLAGS_${variant}})
  localllm_add_modules(${core} _${variant} _variants/${variant})
endforeach()

# The probe: plain x86-64 (no -march), the one CPU-feature file, no core.
pybind11_add_module(_cpu_probe ${CMAKE_SOURCE_DIR}/csrc/bindings/probe/cpu_probe.cpp
                    ${CMAKE_SOURCE_DIR}/csrc/backends/cpu/cpu_features.cpp)
target_include_directories(_cpu_probe PRIVATE ${CMAKE_SOURCE_DIR}/csrc)
set_target_properties(_cpu_probe PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/_variants)
install(TARGETS _cpu_probe LIBRARY DESTINATION localllm/_variants)
if(LOCALLLM_INPLACE)
  add_custom_command(TARGET _cpu_probe POST_BUILD
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_SOURCE_DIR}/python/localllm/_variants
    COMMAND ${CMAKE_COMMAND} -E copy $<TARGET_FILE:_cpu_probe> ${CMAKE_SOURCE_DIR}/python/localllm/_variants/)
endif()
