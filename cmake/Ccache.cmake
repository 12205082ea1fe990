# Compiles through ccache when it is installed (TRAINYARD_CCACHE=ON, the
# default; OFF or no ccache: the compiler alone). The cache lives outside the
# build tree (ccache's own default, ~/.cache/ccache, or $CCACHE_DIR), so a
# new clone or a new build directory on the same machine compiles from it:
# paths under the source tree are hashed relative to it (base_dir), the
# build directory is not hashed, and the precompiled headers are cached too
# (the sloppiness ccache's manual asks for with them).
option(TRAINYARD_CCACHE "Compile through ccache when it is installed" ON)
if(NOT TRAINYARD_CCACHE)
  return()
endif()
find_program(TRAINYARD_CCACHE_PROGRAM ccache)
if(NOT TRAINYARD_CCACHE_PROGRAM)
  message(STATUS "ccache: not found, compiling without it")
  return()
endif()
set(_ty_ccache
    ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} CCACHE_NOHASHDIR=1
    CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime CCACHE_MAXSIZE=20G
    ${TRAINYARD_CCACHE_PROGRAM})
set(CMAKE_CXX_COMPILER_LAUNCHER ${_ty_ccache})
set(CMAKE_C_COMPILER_LAUNCHER ${_ty_ccache})
message(STATUS "ccache: ${TRAINYARD_CCACHE_PROGRAM} (base_dir ${PROJECT_SOURCE_DIR})")
