# `cmake --install` and `cpack -G DEB`: the tool, its man page, the library with its public
# headers, a CMake package (and the Python package: python/CMakeLists.txt), so that a C++ project can
#   find_package(onnx_rewrite CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE onnx_rewrite::onnx_rewrite)   # #include <onnx_rewrite/onnx_rewrite.h>
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ONNX_REWRITE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/onnx_rewrite)

install(TARGETS onnx-rewrite RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tool)
install(FILES ${PROJECT_SOURCE_DIR}/docs/onnx-rewrite.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT tool)
# The runtime drivers `verify` and `--verify` run models with (src/runtime/driver.cc looks for them
# here, relative to the tool); ONNX Runtime itself comes from npm or pip.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/tools/ort-driver/ DESTINATION ${CMAKE_INSTALL_DATADIR}/onnx-rewrite/ort-driver COMPONENT tool
        FILES_MATCHING PATTERN "*.js" PATTERN "*.py" PATTERN "*.md")
install(TARGETS onnx_rewrite EXPORT onnx_rewrite_targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/onnx_rewrite DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT library)
install(EXPORT onnx_rewrite_targets NAMESPACE onnx_rewrite:: DESTINATION ${ONNX_REWRITE_CMAKE_DIR} COMPONENT library)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/onnx_rewriteConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/onnx_rewriteConfig.cmake INSTALL_DESTINATION ${ONNX_REWRITE_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/onnx_rewriteConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/onnx_rewriteConfig.cmake ${PROJECT_BINARY_DIR}/onnx_rewriteConfigVersion.cmake
        DESTINATION ${ONNX_REWRITE_CMAKE_DIR} COMPONENT library)

# Packages: onnx-rewrite (the tool, its man page, the library, headers and CMake package: the
# tool is the point, the rest is small) and, where the Python package is built (python/),
# python3-onnx-rewrite, which needs neither the tool nor the library (the extension holds both).
set(CPACK_PACKAGE_NAME onnx-rewrite)
set(CPACK_PACKAGE_VENDOR "onnx-rewrite")
set(CPACK_PACKAGE_CONTACT "onnx-rewrite maintainers <onnx-rewrite@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Rewrites ONNX models with pattern rules so that a target runtime can load them")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)          # onnx-rewrite_<version>_amd64.deb, python3-onnx-rewrite_<version>_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)           # Depends: the shared libraries the binaries link
set(CPACK_PACKAGE_INSTALL_DIRECTORY onnx-rewrite)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_GROUPING ONE_PER_GROUP)     # a package per group below
set(CPACK_DEBIAN_MAIN_PACKAGE_NAME onnx-rewrite)
set(CPACK_DEBIAN_MAIN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_MAIN_PACKAGE_SUGGESTS "graphviz")  # `--html` draws its pictures with dot
set(CPACK_DEBIAN_MAIN_DESCRIPTION "The onnx-rewrite tool, its man page, and the C++ library with its headers and CMake package.")
if(ONNX_REWRITE_PYTHON_ENABLED)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-onnx-rewrite)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "${ONNX_REWRITE_PYTHON_DEPENDS}")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SUGGESTS "python3-onnx")  # results as onnx.ModelProto (else bytes)
  set(CPACK_DEBIAN_PYTHON_DESCRIPTION "The Python package onnx_rewrite: rewrite, check, rules and targets from Python; python3 -m onnx_rewrite runs the command line.")
endif()
include(CPack)
cpack_add_component(tool GROUP main)
cpack_add_component(library GROUP main)
if(ONNX_REWRITE_PYTHON_ENABLED)
  cpack_add_component(python GROUP python)
endif()
