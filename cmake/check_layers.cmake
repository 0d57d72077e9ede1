# The layering of src/ (docs/DESIGN.md, "Where things live"), checked on every build: an
# #include that points up a layer, or from one backend folder into another, fails the build
# naming the file and the line. All of src/ is one shared library with one include root, so
# the compiler cannot see the arrows; this script can.
#
#   cmake -DSRC=<dir holding the layer folders> [-DSTAMP=<file to touch>] -P check_layers.cmake
cmake_minimum_required(VERSION 3.25)
if(NOT SRC)
  message(FATAL_ERROR "check_layers.cmake: -DSRC=... is required")
endif()

# What each folder may include besides itself (the public include/collage/ is open to all).
set(allowed_cli search runtime plan pattern ir ops models view util)
set(allowed_search runtime plan pattern ir ops util)
set(allowed_runtime plan pattern ir ops util)
set(allowed_plan ir ops util)
set(allowed_pattern ir ops util)
set(allowed_ir ops util)
set(allowed_ops util)
set(allowed_util)
set(allowed_models ir ops util)
set(allowed_view plan pattern ir ops util)
# Devices a backend computes on (src/devices/NAME: memory, streams, copies), shared by the
# backends of one device kind; the runtime sees them only through collage/device.h.
set(allowed_devices util)
# A backend folder: its own folder (checked below), and the layers a kernel builds on.
set(allowed_backends runtime pattern ir ops util devices)
set(layers cli search runtime plan pattern ir ops util models view backends devices)

file(GLOB_RECURSE sources RELATIVE ${SRC} ${SRC}/*.cc ${SRC}/*.h)
set(violations "")
foreach(source IN LISTS sources)
  string(REGEX MATCH "^[^/]+" layer "${source}")
  if(NOT layer IN_LIST layers)
    continue()
  endif()
  if(layer STREQUAL "backends")
    string(REGEX MATCH "^backends/([^/]+)/" _ "${source}")
    set(own_backend "${CMAKE_MATCH_1}")
  endif()
  file(STRINGS ${SRC}/${source} includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"[^\"]+\"")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^[^\"]*\"([^\"]+)\".*$" "\\1" target "${line}")
    string(REGEX MATCH "^[^/]+" target_layer "${target}")
    if((NOT target_layer IN_LIST layers) OR
       (target_layer STREQUAL layer AND NOT layer STREQUAL "backends"))
      continue()
    endif()
    if(target_layer STREQUAL "backends")
      if(layer STREQUAL "backends" AND target MATCHES "^backends/${own_backend}/")
        continue()
      endif()
      string(APPEND violations "  src/${source}: #include \"${target}\" (another backend's folder)\n")
    elseif(NOT target_layer IN_LIST allowed_${layer})
      string(REPLACE ";" ", " may "${allowed_${layer}}")
      string(APPEND violations
             "  src/${source}: #include \"${target}\" (${layer} may include: ${may})\n")
    endif()
  endforeach()
endforeach()

if(violations)
  message(FATAL_ERROR "includes that point up a layer (docs/DESIGN.md, \"Where things live\"):\n"
                      "${violations}")
endif()
if(STAMP)
  file(TOUCH ${STAMP})
endif()
