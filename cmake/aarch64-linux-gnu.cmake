# Cross build for aarch64 Linux with Debian's g++-aarch64-linux-gnu (scripts/build_aarch64.sh):
#   cmake -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DLOCALLLM_ARM64_SYSROOT=<dir> ...
# LOCALLLM_ARM64_SYSROOT is a folder with Debian's arm64 Python unpacked into it (its headers in
# usr/include/python3.X and usr/include/aarch64-linux-gnu/python3.X): the extension modules compile
# against those headers and take the arm64 suffix; the host's Python still runs the build's
# generators (the i-quant grids) and pybind11's CMake files. The compiler's own sysroot
# (/usr/aarch64-linux-gnu: libc, libstdc++) is the target's; nothing is linked from the host.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)   # pybind11's CMake files come from the host's venv

# -march=native means the build machine's CPU; an armv8-a baseline runs on every aarch64 CPU
# (the Dotprod kernels are compiled for more in their own file and chosen at run time).
set(LOCALLLM_NATIVE OFF CACHE BOOL "" FORCE)
set(LOCALLLM_CUDA OFF CACHE STRING "" FORCE)
set(LOCALLLM_VULKAN OFF CACHE STRING "" FORCE)

if(NOT LOCALLLM_ARM64_SYSROOT)
  set(LOCALLLM_ARM64_SYSROOT "$ENV{LOCALLLM_ARM64_SYSROOT}")
endif()
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES LOCALLLM_ARM64_SYSROOT)   # try_compile reads this file too
if(NOT LOCALLLM_ARM64_SYSROOT)
  message(FATAL_ERROR "cmake/aarch64-linux-gnu.cmake: set LOCALLLM_ARM64_SYSROOT to the folder holding Debian's "
                      "arm64 Python (scripts/build_aarch64.sh makes it)")
endif()
file(GLOB arm64_python_headers "${LOCALLLM_ARM64_SYSROOT}/usr/include/python3.*")
list(LENGTH arm64_python_headers n_headers)
if(NOT n_headers EQUAL 1)
  message(FATAL_ERROR "${LOCALLLM_ARM64_SYSROOT}/usr/include: expected one python3.X header folder, found '${arm64_python_headers}'")
endif()
get_filename_component(arm64_python "${arm64_python_headers}" NAME)   # python3.11
string(REPLACE "python" "" arm64_python_version "${arm64_python}")    # 3.11
string(REPLACE "." "" arm64_python_abi "${arm64_python_version}")     # 311
# Python.h includes <aarch64-linux-gnu/python3.X/pyconfig.h> (Debian's multiarch layout).
set(Python_INCLUDE_DIR "${arm64_python_headers}" CACHE PATH "" FORCE)
set(CMAKE_CXX_FLAGS_INIT "-isystem ${LOCALLLM_ARM64_SYSROOT}/usr/include")
# What pybind11 cannot ask a host interpreter when cross compiling.
set(PYTHON_MODULE_EXTENSION ".cpython-${arm64_python_abi}-aarch64-linux-gnu.so" CACHE STRING "" FORCE)
set(PYTHON_MODULE_DEBUG_POSTFIX "" CACHE STRING "" FORCE)
set(PYTHON_IS_DEBUG FALSE CACHE BOOL "" FORCE)
