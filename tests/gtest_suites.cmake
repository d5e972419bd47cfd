# Registers a GoogleTest binary's tests with CTest one suite at a time (run at build time, after the
# binary is linked: tests/CMakeLists.txt, phi4mm_add_test_suites). A suite runs as one process
# (--gtest_filter=Suite.*), so its fixtures load once and CTest starts ~100 processes instead of
# ~450. Inputs: EXE, OUT (the CTest include file written), LABEL, TIMEOUT, WORKDIR, EMULATOR
# ("|"-separated; empty natively).
string(REPLACE "|" ";" emulator "${EMULATOR}")
execute_process(COMMAND ${emulator} "${EXE}" --gtest_list_tests OUTPUT_VARIABLE listing RESULT_VARIABLE rc
                WORKING_DIRECTORY "${WORKDIR}" TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "listing the tests of ${EXE} failed (${rc})")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(script "")
foreach(line IN LISTS lines)
  # Suite lines start in column 0 and end with '.', perhaps followed by "  # TypeParam = ...".
  if(line MATCHES "^([^ #][^ ]*)\\.( .*)?$")
    set(suite "${CMAKE_MATCH_1}")
    string(APPEND script "add_test([=[${suite}]=] ${emulator} [=[${EXE}]=] [=[--gtest_filter=${suite}.*]=] --gtest_brief=1)\n"
           "set_tests_properties([=[${suite}]=] PROPERTIES LABELS ${LABEL} TIMEOUT ${TIMEOUT} WORKING_DIRECTORY [=[${WORKDIR}]=])\n")
  endif()
endforeach()
file(WRITE "${OUT}" "${script}")
