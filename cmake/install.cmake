# `cmake --install build --prefix P`: the CLI (P/bin), libcollage_core.so (and
# libcollage_torch.so beside it, where the torch front end dlopen()s it from), the public
# headers (P/include/collage), a CMake package (find_package(collage) -> collage::collage,
# collage::cli), a pkg-config file and the Python package (python/CMakeLists.txt). Installed
# binaries find their libraries through a relative RPATH, so the tree may live anywhere.
include(CMakePackageConfigHelpers)

set(COLLAGE_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/collage)

# Libraries outside the system's search path that a backend links (the CUDA toolkit's)
# are found where the build found them.
get_property(_core_rpath GLOBAL PROPERTY COLLAGE_CORE_INSTALL_RPATH)
set_target_properties(collage_core PROPERTIES EXPORT_NAME collage
                                              INSTALL_RPATH "$ORIGIN;${_core_rpath}")
set_target_properties(collage PROPERTIES EXPORT_NAME cli
                                         INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
add_library(collage::collage ALIAS collage_core)

install(TARGETS collage_core collage EXPORT collageTargets
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(TARGET collage_torch)
  set_target_properties(collage_torch PROPERTIES INSTALL_RPATH "$ORIGIN")
  install(TARGETS collage_torch LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/collage
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")

install(EXPORT collageTargets NAMESPACE collage:: DESTINATION ${COLLAGE_CMAKE_INSTALL_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/collageConfig.cmake.in
  ${PROJECT_BINARY_DIR}/collageConfig.cmake INSTALL_DESTINATION ${COLLAGE_CMAKE_INSTALL_DIR})
# No ABI promise between minor versions yet (0.x): a consumer asking for 0.1 gets 0.1.*.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/collageConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/collageConfig.cmake
              ${PROJECT_BINARY_DIR}/collageConfigVersion.cmake
        DESTINATION ${COLLAGE_CMAKE_INSTALL_DIR})

# pkg-config: prefix computed from the .pc file's own place, so it is relocatable too.
set(_pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
file(RELATIVE_PATH COLLAGE_PC_PREFIX_FROM_PCDIR /prefix/${_pc_dir} /prefix)
string(REGEX REPLACE "/$" "" COLLAGE_PC_PREFIX_FROM_PCDIR "${COLLAGE_PC_PREFIX_FROM_PCDIR}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/collage.pc.in ${PROJECT_BINARY_DIR}/collage.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/collage.pc DESTINATION ${_pc_dir})
