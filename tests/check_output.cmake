# Runs a command and checks both its exit status and its output, for ctests that must see a
# program fail (or succeed) for the right reason. CTest's PASS_REGULAR_EXPRESSION alone
# makes CTest ignore the exit status, so a crash that printed the right words would pass.
#
#   cmake -DEXPECT_EXIT=N -DEXPECT_OUTPUT=REGEX -P check_output.cmake -- COMMAND ARGS...
#
# EXPECT_EXIT: the exit status required (default 0). EXPECT_OUTPUT: a regular expression that
# stdout + stderr must match (optional; CMake regex syntax, '.' matches newlines too).
# The arguments after -- must not contain ';' (CMake would split them there).
if(NOT DEFINED EXPECT_EXIT)
  set(EXPECT_EXIT 0)
endif()

set(command)
set(after_separator FALSE)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  if(after_separator)
    list(APPEND command "${CMAKE_ARGV${i}}")
  elseif("${CMAKE_ARGV${i}}" STREQUAL "--")
    set(after_separator TRUE)
  endif()
endforeach()
if(NOT command)
  message(FATAL_ERROR "check_output.cmake: no command after --")
endif()

execute_process(COMMAND ${command} RESULT_VARIABLE status OUTPUT_VARIABLE out
                ERROR_VARIABLE out)
message("${out}")
if(NOT "${status}" STREQUAL "${EXPECT_EXIT}")
  message(FATAL_ERROR "check_output.cmake: exit status ${status}, expected ${EXPECT_EXIT}")
endif()
if(DEFINED EXPECT_OUTPUT AND NOT out MATCHES "${EXPECT_OUTPUT}")
  message(FATAL_ERROR "check_output.cmake: the output does not match '${EXPECT_OUTPUT}'")
endif()
