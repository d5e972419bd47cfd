# The Python package's extension module `phi4mm._phi4mm` (tools/python, nanobind), and under
# scikit-build-core (`pip install .`, pyproject.toml) the package's install layout: the module and
# the `phi4mm` CLI (which `python -m phi4mm` runs) go into the package folder of the wheel. The
# module links the static libraries (position-independent for that) into one shared object, with
# nanobind's own runtime linked in statically (NB_STATIC). Its type stubs are generated from the
# built module (nanobind's stubgen) and installed beside it.
find_package(Python 3.9 REQUIRED COMPONENTS Interpreter Development.Module)
if(NOT nanobind_ROOT)
  execute_process(COMMAND "${Python_EXECUTABLE}" -m nanobind --cmake_dir
    OUTPUT_STRIP_TRAILING_WHITESPACE OUTPUT_VARIABLE nanobind_ROOT RESULT_VARIABLE nanobind_missing)
  if(nanobind_missing)
    message(FATAL_ERROR "PHI4MM_PYTHON needs nanobind in ${Python_EXECUTABLE}: pip install -r tools/python/build-requirements.txt "
                        "(or build the package with `pip install .`, which fetches it)")
  endif()
endif()
find_package(nanobind CONFIG REQUIRED)

file(GLOB PHI4MM_PYTHON_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/tools/python/*.cc)
nanobind_add_module(_phi4mm NB_STATIC ${PHI4MM_PYTHON_SOURCES})
target_compile_options(_phi4mm PRIVATE ${PHI4MM_WARNINGS})
target_link_libraries(_phi4mm PRIVATE phi4mm phi4mm_server nlohmann_json::nlohmann_json)
# Beside python/phi4mm in the build tree, so tests can import the package from there
# (PYTHONPATH=build/python) without installing it.
set(PHI4MM_PYTHON_TREE ${CMAKE_CURRENT_BINARY_DIR}/python/phi4mm)
set_target_properties(_phi4mm PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${PHI4MM_PYTHON_TREE})
file(GLOB PHI4MM_PYTHON_FILES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/python/phi4mm/*)
add_custom_command(TARGET _phi4mm POST_BUILD
  COMMAND ${CMAKE_COMMAND} -E copy_if_different ${PHI4MM_PYTHON_FILES} ${PHI4MM_PYTHON_TREE}/
  COMMAND ${CMAKE_COMMAND} -E make_directory ${PHI4MM_PYTHON_TREE}/bin
  COMMAND ${CMAKE_COMMAND} -E create_symlink $<TARGET_FILE:phi4mm_cli> ${PHI4MM_PYTHON_TREE}/bin/phi4mm)
add_dependencies(_phi4mm phi4mm_cli)
nanobind_add_stub(_phi4mm_stub MODULE phi4mm._phi4mm OUTPUT ${PHI4MM_PYTHON_TREE}/_phi4mm.pyi
  PYTHON_PATH ${CMAKE_CURRENT_BINARY_DIR}/python DEPENDS _phi4mm)

if(SKBUILD)
  install(TARGETS _phi4mm LIBRARY DESTINATION phi4mm)
  install(TARGETS phi4mm_cli RUNTIME DESTINATION phi4mm/bin)
  install(FILES ${PHI4MM_PYTHON_TREE}/_phi4mm.pyi DESTINATION phi4mm)
endif()
