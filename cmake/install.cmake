# The installable library. `cmake --install <build> --prefix P` lays out
#   P/lib/libphi4mm.so.<version> and its links: the whole library (XGrammar inside), one file whose
#     other dependencies are Debian's shared libraries;
#   P/include/phi4mm/...: the public headers, included as in the source tree: the C API
#     (phi4mm/capi/phi4mm_c.h) and the C++ one (phi4mm/runtime/engine.h, session.h, chat.h, ...;
#     C++20); kernel internals (Highway and intrinsic headers) and the ONNX exporter are left out;
#   P/lib/cmake/phi4mm/: the CMake package, find_package(phi4mm) giving phi4mm::phi4mm;
#   P/lib/pkgconfig/phi4mm.pc (relocatable: its prefix is found from where it lies);
#   P/bin/phi4mm: the CLI.
# tests/consumers/ holds a C and a C++ project that CI builds against such a tree, through the
# CMake package and through pkg-config (scripts/install_checks.sh).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

add_library(phi4mm_shared SHARED $<TARGET_OBJECTS:phi4mm>)
set_target_properties(phi4mm_shared PROPERTIES OUTPUT_NAME phi4mm EXPORT_NAME phi4mm
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
target_link_libraries(phi4mm_shared PUBLIC Threads::Threads PRIVATE ${PHI4MM_PRIVATE_DEPS})
# Everything a program needs must be inside the library: refuse undefined symbols at link time.
target_link_options(phi4mm_shared PRIVATE -Wl,--no-undefined)
target_include_directories(phi4mm_shared INTERFACE $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/src>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

install(TARGETS phi4mm_shared EXPORT phi4mmTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library)
install(TARGETS phi4mm_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT cli)
install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/src/phi4mm DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT library
  FILES_MATCHING PATTERN "*.h"
  PATTERN "*-inl.h" EXCLUDE PATTERN "*_internal.h" EXCLUDE PATTERN "vnni_ymm_tiles.h" EXCLUDE
  PATTERN "avx2_reduce.h" EXCLUDE PATTERN "tokenizer_json.h" EXCLUDE PATTERN "export" EXCLUDE PATTERN "onnx" EXCLUDE)

set(PHI4MM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/phi4mm)
install(EXPORT phi4mmTargets NAMESPACE phi4mm:: DESTINATION ${PHI4MM_CMAKE_DIR} COMPONENT library)
configure_package_config_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/phi4mmConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/phi4mmConfig.cmake INSTALL_DESTINATION ${PHI4MM_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/phi4mmConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/phi4mmConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/phi4mmConfigVersion.cmake
  DESTINATION ${PHI4MM_CMAKE_DIR} COMPONENT library)
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/phi4mm.pc.in ${CMAKE_CURRENT_BINARY_DIR}/phi4mm.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/phi4mm.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT library)
