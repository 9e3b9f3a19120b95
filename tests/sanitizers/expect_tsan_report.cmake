# tests/sanitizers/expect_tsan_report.cmake — runs PROGRAM (the TSan canary) and passes only if it
# exits non-zero AND ThreadSanitizer reported a data race in parallel_for: either alone could be
# something else (a crash, or a report TSan printed without failing the program).
execute_process(COMMAND ${PROGRAM} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "the racy canary exited 0: TSan did not fail it\n${out}${err}")
endif()
if(NOT err MATCHES "WARNING: ThreadSanitizer: data race" OR NOT err MATCHES "parallel")
  message(FATAL_ERROR "the canary failed (exit ${rc}) without TSan's data-race report in parallel_for:\n${err}")
endif()
message(STATUS "TSan reported the race and failed the canary (exit ${rc})")
