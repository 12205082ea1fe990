# LibTorch from a Python's `torch` package (PyPI's wheel ships include/, lib/
# and share/cmake/Torch). TRAINYARD_PYTHON names that Python: by default the
# project venv that scripts/pyenv.sh makes; on a machine with torch already
# installed, point it at that interpreter (torch 2.10 or newer).
#
# Defines trainyard::torch, an interface target carrying LibTorch's libraries,
# compile flags and the c10d defines, with run paths to the wheel's own CUDA
# libraries (nvidia-* packages: cudart, cuBLAS, cuDNN, NCCL, ...), so that one
# binary runs CPU jobs anywhere and CUDA jobs where a GPU is visible.
set(TRAINYARD_PYTHON "${PROJECT_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH
    "Python interpreter whose torch package supplies LibTorch (scripts/pyenv.sh makes the default)")
option(TRAINYARD_REQUIRE_CUDA "Fail unless the torch found is a CUDA build (NCCL linked in)" ON)

if(NOT EXISTS "${TRAINYARD_PYTHON}")
  message(FATAL_ERROR "TRAINYARD_PYTHON=${TRAINYARD_PYTHON} does not exist: run scripts/pyenv.sh, "
                      "or pass -DTRAINYARD_PYTHON=/path/to/python whose torch (>= 2.10) to build against")
endif()
execute_process(
  COMMAND "${TRAINYARD_PYTHON}" -c
          "import os, torch; print(torch.utils.cmake_prefix_path); print(torch.__version__.split('+')[0]); print(torch.version.cuda or ''); print(os.path.dirname(os.path.dirname(torch.__file__)))"
  OUTPUT_VARIABLE _ty_torch_out ERROR_VARIABLE _ty_torch_err RESULT_VARIABLE _ty_torch_rc
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _ty_torch_rc EQUAL 0)
  message(FATAL_ERROR "${TRAINYARD_PYTHON} cannot import torch: ${_ty_torch_err}")
endif()
string(REPLACE "\n" ";" _ty_torch_out "${_ty_torch_out}")
list(GET _ty_torch_out 0 _ty_cmake_prefix)
list(GET _ty_torch_out 1 TRAINYARD_TORCH_VERSION)
list(GET _ty_torch_out 2 TRAINYARD_TORCH_CUDA)
list(GET _ty_torch_out 3 _ty_site_packages)
if(TRAINYARD_TORCH_VERSION VERSION_LESS 2.10)
  message(FATAL_ERROR "torch ${TRAINYARD_TORCH_VERSION} at ${TRAINYARD_PYTHON} is older than 2.10")
endif()
if(TRAINYARD_REQUIRE_CUDA AND TRAINYARD_TORCH_CUDA STREQUAL "")
  message(FATAL_ERROR "torch ${TRAINYARD_TORCH_VERSION} at ${TRAINYARD_PYTHON} is a CPU-only build; "
                      "install a CUDA build or configure with -DTRAINYARD_REQUIRE_CUDA=OFF")
endif()

# The wheel's CUDA libraries, for linking (transitive NEEDED entries of
# libtorch_cuda) and at run time.
file(GLOB _ty_nvidia_libs LIST_DIRECTORIES true "${_ty_site_packages}/nvidia/*/lib")
if(_ty_nvidia_libs)
  # The wheel's CUDA headers (nvidia/cu13/include) stand in for a toolkit.
  file(GLOB _ty_nvidia_roots LIST_DIRECTORIES true "${_ty_site_packages}/nvidia/cu*")
  list(APPEND CMAKE_PREFIX_PATH ${_ty_nvidia_roots})
endif()
list(APPEND CMAKE_PREFIX_PATH "${_ty_cmake_prefix}")
# Trainyard compiles no CUDA kernels: naming the architectures skips Caffe2's
# probe of the installed GPUs (a try_run that fails on machines without one).
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "8.0;9.0")
endif()
find_package(Torch REQUIRED)
message(STATUS "LibTorch ${TRAINYARD_TORCH_VERSION} (CUDA ${TRAINYARD_TORCH_CUDA}) from ${TRAINYARD_PYTHON}")

add_library(trainyard_torch INTERFACE)
add_library(trainyard::torch ALIAS trainyard_torch)
target_link_libraries(trainyard_torch INTERFACE ${TORCH_LIBRARIES})
target_compile_options(trainyard_torch INTERFACE ${TORCH_CXX_FLAGS})
# ProcessGroupGloo.hpp needs gloo's headers, which the wheel lacks: Debian's
# libgloo-dev provides them on the default include path.
target_compile_definitions(trainyard_torch INTERFACE USE_DISTRIBUTED USE_C10D_GLOO)
if(NOT TRAINYARD_TORCH_CUDA STREQUAL "")
  target_compile_definitions(trainyard_torch INTERFACE USE_C10D_NCCL TRAINYARD_WITH_CUDA)
  set(TRAINYARD_WITH_CUDA ON)
else()
  set(TRAINYARD_WITH_CUDA OFF)
endif()
get_filename_component(_ty_torch_lib "${_ty_cmake_prefix}/../../lib" ABSOLUTE)
set(TRAINYARD_TORCH_RPATH "${_ty_torch_lib};${_ty_nvidia_libs}")
target_link_directories(trainyard_torch INTERFACE ${_ty_nvidia_libs})
target_link_options(trainyard_torch INTERFACE "-Wl,-rpath,$<JOIN:${TRAINYARD_TORCH_RPATH},:>"
                    "-Wl,-rpath-link,$<JOIN:${TRAINYARD_TORCH_RPATH},:>" "-Wl,--no-as-needed")
