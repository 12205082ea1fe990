# LibTorch from a Python's `torch` package (PyPI's wheel ships include/, lib/
# and share/cmake/Torch). TRAINYARD_PYTHON names that Python: by default the
# project venv that scripts/pyenv.sh makes; on a machine with torch already
# installed, point it at that interpreter (torch 2.10 or newer).
#
# Defines trainyard::torch, an interface target with LibTorch's headers,
# libraries and c10d defines, and run paths to the wheel's own CUDA libraries
# (nvidia-* packages: cudart, cuBLAS, cuDNN, NCCL), so that one binary runs
# CPU jobs anywhere and CUDA jobs where a GPU is visible.
#
# The target is made from the package's layout rather than through
# find_package(Torch): Torch's CMake package insists on a CUDA toolkit (nvcc,
# and a GPU probe) for a CUDA build, though Trainyard compiles no CUDA code;
# the CUDA and NCCL headers the NCCL process group includes come with the
# wheel (nvidia/*/include), or from a toolkit when the wheel has none.
set(TRAINYARD_PYTHON "${PROJECT_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH
    "Python interpreter whose torch package supplies LibTorch (scripts/pyenv.sh makes the default)")
option(TRAINYARD_REQUIRE_CUDA "Fail unless the torch found is a CUDA build (NCCL linked in)" ON)

if(NOT EXISTS "${TRAINYARD_PYTHON}")
  message(FATAL_ERROR "TRAINYARD_PYTHON=${TRAINYARD_PYTHON} does not exist: run scripts/pyenv.sh, "
                      "or pass -DTRAINYARD_PYTHON=/path/to/python whose torch (>= 2.10) to build against")
endif()
execute_process(
  COMMAND "${TRAINYARD_PYTHON}" -c
          "import os, torch; print(os.path.dirname(torch.__file__)); print(torch.__version__.split('+')[0]); \
print(torch.version.cuda or ''); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
  OUTPUT_VARIABLE _ty_out ERROR_VARIABLE _ty_err RESULT_VARIABLE _ty_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _ty_rc EQUAL 0)
  message(FATAL_ERROR "${TRAINYARD_PYTHON} cannot import torch: ${_ty_err}")
endif()
string(REPLACE "\n" ";" _ty_out "${_ty_out}")
list(GET _ty_out 0 TRAINYARD_TORCH_DIR)
list(GET _ty_out 1 TRAINYARD_TORCH_VERSION)
list(GET _ty_out 2 TRAINYARD_TORCH_CUDA)
list(GET _ty_out 3 _ty_cxx11_abi)
get_filename_component(_ty_site_packages "${TRAINYARD_TORCH_DIR}" DIRECTORY)
if(TRAINYARD_TORCH_VERSION VERSION_LESS 2.10)
  message(FATAL_ERROR "torch ${TRAINYARD_TORCH_VERSION} at ${TRAINYARD_PYTHON} is older than 2.10")
endif()
if(TRAINYARD_REQUIRE_CUDA AND TRAINYARD_TORCH_CUDA STREQUAL "")
  message(FATAL_ERROR "torch ${TRAINYARD_TORCH_VERSION} at ${TRAINYARD_PYTHON} is a CPU-only build; "
                      "install a CUDA build or configure with -DTRAINYARD_REQUIRE_CUDA=OFF")
endif()
set(TRAINYARD_WITH_CUDA OFF)
if(NOT TRAINYARD_TORCH_CUDA STREQUAL "")
  set(TRAINYARD_WITH_CUDA ON)
endif()

add_library(trainyard_torch INTERFACE)
add_library(trainyard::torch ALIAS trainyard_torch)
# torch's include/ also holds the protobuf headers torch was built with;
# where they are older than Debian's (torch 2.11's), gRPC's generated code
# meets them first and refuses to compile. Trainyard sees torch's headers
# through a folder of links to every entry of include/ but google/.
set(_ty_include "${CMAKE_BINARY_DIR}/torch-include")
file(REMOVE_RECURSE "${_ty_include}")
file(MAKE_DIRECTORY "${_ty_include}")
file(GLOB _ty_entries RELATIVE "${TRAINYARD_TORCH_DIR}/include" "${TRAINYARD_TORCH_DIR}/include/*")
foreach(_entry IN LISTS _ty_entries)
  if(NOT _entry STREQUAL "google")
    file(CREATE_LINK "${TRAINYARD_TORCH_DIR}/include/${_entry}" "${_ty_include}/${_entry}" SYMBOLIC)
  endif()
endforeach()
target_include_directories(trainyard_torch SYSTEM INTERFACE "${_ty_include}" "${_ty_include}/torch/csrc/api/include")
target_compile_definitions(trainyard_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=${_ty_cxx11_abi})

# The defines LibTorch's own CMake package gives its users (USE_DISTRIBUTED,
# USE_C10D_GLOO, USE_C10D_NCCL, ...): they select what c10d's headers
# declare, so they must match the build of the libraries.
file(READ "${TRAINYARD_TORCH_DIR}/share/cmake/Caffe2/Caffe2Targets.cmake" _ty_targets)
string(REPLACE ";" "," _ty_targets "${_ty_targets}")  # one list element per match below
string(REGEX MATCHALL "INTERFACE_COMPILE_DEFINITIONS \"[A-Za-z0-9_,]*\"" _ty_def_lines "${_ty_targets}")
set(_ty_defs)
foreach(_line IN LISTS _ty_def_lines)
  string(REGEX REPLACE "INTERFACE_COMPILE_DEFINITIONS \"([A-Za-z0-9_,]*)\"" "\\1" _values "${_line}")
  string(REPLACE "," ";" _values "${_values}")
  list(APPEND _ty_defs ${_values})
endforeach()
list(APPEND _ty_defs USE_DISTRIBUTED USE_C10D_GLOO)  # Gloo's headers come from Debian's libgloo-dev
list(REMOVE_DUPLICATES _ty_defs)
if(NOT TRAINYARD_WITH_CUDA)
  list(FILTER _ty_defs EXCLUDE REGEX "NCCL|NVSHMEM")
endif()
target_compile_definitions(trainyard_torch INTERFACE ${_ty_defs})

set(_ty_libs torch torch_cpu c10)
if(TRAINYARD_WITH_CUDA)
  list(APPEND _ty_libs torch_cuda c10_cuda)
  target_compile_definitions(trainyard_torch INTERFACE TRAINYARD_WITH_CUDA)
endif()
foreach(_lib IN LISTS _ty_libs)
  find_library(_ty_lib_${_lib} ${_lib} PATHS "${TRAINYARD_TORCH_DIR}/lib" NO_DEFAULT_PATH)
  if(NOT _ty_lib_${_lib})
    message(FATAL_ERROR "lib${_lib}.so not found in ${TRAINYARD_TORCH_DIR}/lib")
  endif()
  target_link_libraries(trainyard_torch INTERFACE "${_ty_lib_${_lib}}")
endforeach()

# CUDA and NCCL: the wheel's nvidia-* packages (headers and libraries), else
# an installed toolkit's headers.
file(GLOB _ty_nvidia_libs LIST_DIRECTORIES true "${_ty_site_packages}/nvidia/*/lib")
if(TRAINYARD_WITH_CUDA)
  file(GLOB _ty_candidates LIST_DIRECTORIES true "${_ty_site_packages}/nvidia/*/include")
  if(DEFINED ENV{CUDA_HOME})
    list(APPEND _ty_candidates "$ENV{CUDA_HOME}/include")
  endif()
  list(APPEND _ty_candidates /usr/local/cuda/include /usr/include)
  # The runtime headers must come with crt/ (host compilation needs it: the
  # wheel's nvidia-cuda-crt, or a toolkit).
  set(_ty_cuda_runtime_h)
  set(_ty_nccl_h)
  foreach(_dir IN LISTS _ty_candidates)
    if(NOT _ty_cuda_runtime_h AND EXISTS "${_dir}/cuda_runtime_api.h" AND EXISTS "${_dir}/crt/host_config.h")
      set(_ty_cuda_runtime_h "${_dir}")
    endif()
    if(NOT _ty_nccl_h AND EXISTS "${_dir}/nccl.h")
      set(_ty_nccl_h "${_dir}")
    endif()
  endforeach()
  if(NOT _ty_cuda_runtime_h OR NOT _ty_nccl_h)
    message(FATAL_ERROR "CUDA runtime headers (with crt/) or nccl.h not found in ${_ty_candidates}: install "
                        "nvidia-cuda-crt into the torch's environment (scripts/pyenv.sh does) or a CUDA toolkit")
  endif()
  target_include_directories(trainyard_torch SYSTEM INTERFACE "${_ty_cuda_runtime_h}" "${_ty_nccl_h}")
endif()
# libstdc++ first among the libraries a program needs: some torch builds
# (PyPI's 2.11) export their own copies of libstdc++ functions
# (std::filesystem::remove_all...), and a program that found torch's first
# called into a copy that jumped to address 0 (seen on the GPU kit's
# programs). The dynamic linker binds to the first definition in that order.
target_link_options(trainyard_torch INTERFACE "LINKER:--push-state,--no-as-needed" "-lstdc++" "LINKER:--pop-state")
set(TRAINYARD_TORCH_RPATH "${TRAINYARD_TORCH_DIR}/lib;${_ty_nvidia_libs}")
target_link_options(trainyard_torch INTERFACE "-Wl,-rpath,$<JOIN:${TRAINYARD_TORCH_RPATH},:>"
                    "-Wl,-rpath-link,$<JOIN:${TRAINYARD_TORCH_RPATH},:>")
message(STATUS "LibTorch ${TRAINYARD_TORCH_VERSION} (CUDA ${TRAINYARD_TORCH_CUDA}) from ${TRAINYARD_PYTHON}")
