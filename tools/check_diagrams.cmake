# tools/check_diagrams.cmake — ctest diagrams_are_up_to_date: draws docs/img/*.svg afresh with
# tools/draw_diagrams.py into OUT and fails if they differ from the committed files (re-run
# `/usr/bin/python3 tools/draw_diagrams.py` and commit the result after changing the script).
# docs/img/ddp_trace.svg is drawn by tools/draw_trace.py from the measured trace beside it,
# docs/img/ddp_trace.json (the timings vary from run to run, so the trace is committed and the
# picture must be what the script draws from it; docs/tutorial.md gives the command that
# records a new one). docs/img/zero_memory.svg likewise from the byte counts in
# docs/img/zero_memory.json (tools/draw_zero_memory.py gives the command that measures them).
#   cmake -DSRC=<repo> -DOUT=<dir> -P tools/check_diagrams.cmake
execute_process(COMMAND /usr/bin/python3 ${SRC}/tools/draw_diagrams.py ${OUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "draw_diagrams.py failed (exit ${rc}); it needs matplotlib (Debian: python3-matplotlib)")
endif()
execute_process(COMMAND /usr/bin/python3 ${SRC}/tools/draw_trace.py ${SRC}/docs/img/ddp_trace.json -o ${OUT}/ddp_trace.svg
                OUTPUT_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "draw_trace.py failed on docs/img/ddp_trace.json (exit ${rc})")
endif()
execute_process(COMMAND /usr/bin/python3 ${SRC}/tools/draw_zero_memory.py ${SRC}/docs/img/zero_memory.json
                        -o ${OUT}/zero_memory.svg OUTPUT_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "draw_zero_memory.py failed on docs/img/zero_memory.json (exit ${rc})")
endif()
foreach(name layers.svg ddp_overlap.svg ddp_trace.svg zero_memory.svg)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT}/${name} ${SRC}/docs/img/${name} RESULT_VARIABLE diff)
  if(NOT diff EQUAL 0)
    message(FATAL_ERROR "docs/img/${name} is not what tools/draw_diagrams.py (or draw_trace.py, draw_zero_memory.py) draws: regenerate and commit it")
  endif()
endforeach()
message(STATUS "diagrams_are_up_to_date: docs/img matches tools/draw_diagrams.py, draw_trace.py and draw_zero_memory.py")
