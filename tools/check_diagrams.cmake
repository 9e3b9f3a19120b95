# tools/check_diagrams.cmake — ctest diagrams_are_up_to_date: draws docs/img/*.svg afresh with
# tools/draw_diagrams.py into OUT and fails if they differ from the committed files (re-run
# `/usr/bin/python3 tools/draw_diagrams.py` and commit the result after changing the script).
#   cmake -DSRC=<repo> -DOUT=<dir> -P tools/check_diagrams.cmake
execute_process(COMMAND /usr/bin/python3 ${SRC}/tools/draw_diagrams.py ${OUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "draw_diagrams.py failed (exit ${rc}); it needs matplotlib (Debian: python3-matplotlib)")
endif()
foreach(name layers.svg ddp_overlap.svg)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT}/${name} ${SRC}/docs/img/${name} RESULT_VARIABLE diff)
  if(NOT diff EQUAL 0)
    message(FATAL_ERROR "docs/img/${name} is not what tools/draw_diagrams.py draws: regenerate and commit it")
  endif()
endforeach()
message(STATUS "diagrams_are_up_to_date: docs/img matches tools/draw_diagrams.py")
