# cmake/check_layering.cmake — run by ctest `layering_refuses_upward_includes` (set up in
# cmake/MinidlLayeringTest.cmake; lists arrive separated by "|"):
#   CASES     "<layer>:<upper folder>:<header>|..."  each probe PROBE_DIR/<layer>_includes_<upper>.cpp
#   INCLUDES_<layer>, DEFINES_<layer>                 the include path / definitions of minidl_<layer>
# Every probe must fail to preprocess with its layer's flags, saying the header is not found, and
# preprocess cleanly with minidl_dist's flags. Exit status non-zero, each failure named, otherwise.
string(REPLACE "|" ";" layers "${LAYERS}")
string(REPLACE "|" ";" cases "${CASES}")

function(flags_of layer out)
  string(REPLACE "|" ";" includes "${INCLUDES_${layer}}")
  string(REPLACE "|" ";" defines "${DEFINES_${layer}}")
  set(flags -std=c++20)
  foreach(dir IN LISTS includes)
    list(APPEND flags -I${dir})
  endforeach()
  foreach(def IN LISTS defines)
    list(APPEND flags -D${def})
  endforeach()
  set(${out} ${flags} PARENT_SCOPE)
endfunction()

set(failures "")
flags_of(dist all_flags)
list(LENGTH cases count)
foreach(case IN LISTS cases)
  string(REPLACE ":" ";" parts "${case}")
  list(GET parts 0 layer)
  list(GET parts 1 upper)
  list(GET parts 2 header)
  set(probe ${PROBE_DIR}/${layer}_includes_${upper}.cpp)
  flags_of(${layer} layer_flags)
  execute_process(COMMAND ${CXX} ${layer_flags} -E -o /dev/null ${probe}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(rc EQUAL 0)
    list(APPEND failures "${layer}/ may include ${header}: the upward include compiled")
  elseif(NOT out MATCHES "${header}: No such file|'${header}' file not found")
    list(APPEND failures "${layer}/ including ${header} failed for another reason:\n${out}")
  endif()
  execute_process(COMMAND ${CXX} ${all_flags} -E -o /dev/null ${probe}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    list(APPEND failures "control: ${header} does not preprocess even with minidl_dist's include path:\n${out}")
  endif()
endforeach()

# "../" reaches a sibling folder without the include roots
foreach(layer IN LISTS layers)
  file(GLOB_RECURSE files ${SOURCE_DIR}/${layer}/*.h ${SOURCE_DIR}/${layer}/*.cpp ${SOURCE_DIR}/${layer}/*.cu
                          ${SOURCE_DIR}/${layer}/*.cuh)
  foreach(file IN LISTS files)
    file(STRINGS ${file} relative REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]\\.\\./")
    if(relative)
      list(APPEND failures "${file}: ${relative} (include \"minidl/<folder>/<file>.h\" instead)")
    endif()
  endforeach()
endforeach()

if(failures)
  list(JOIN failures "\n" text)
  message(FATAL_ERROR "layering check failed:\n${text}")
endif()
message(STATUS "layering check: ${count} upward includes refused, each header found from minidl_dist")
