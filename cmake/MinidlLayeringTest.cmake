# cmake/MinidlLayeringTest.cmake — ctest `layering_refuses_upward_includes`: for every layer L and
# every folder U that is neither L nor below it, preprocessing `#include "minidl/U/<header>"`
# with L's own include path and definitions (what L's sources compile with) must fail because the
# header is not found, while the same file preprocesses with minidl_dist's path (which sees every
# layer). The script also refuses `#include "../` in the library folders, the one way around the
# include roots. Runs cmake/check_layering.cmake; a few seconds.

# a header every folder has, included by the probes
set(probe_kernels functors.h)
set(probe_tensor tensor.h)
set(probe_autograd variable.h)
set(probe_nn module.h)
set(probe_optim optimizer.h)
set(probe_data dataset.h)
set(probe_dist distributed.h)

get_property(layers GLOBAL PROPERTY MINIDL_LAYERS)

# below_<L>: the layers L links, directly or through others
foreach(layer IN LISTS layers)
  set(below_${layer} "")
  get_property(pending GLOBAL PROPERTY MINIDL_DEPENDS_${layer})
  while(pending)
    list(POP_FRONT pending next)
    if(NOT next IN_LIST below_${layer})
      list(APPEND below_${layer} ${next})
      get_property(more GLOBAL PROPERTY MINIDL_DEPENDS_${next})
      list(APPEND pending ${more})
    endif()
  endwhile()
endforeach()

set(probe_dir ${PROJECT_BINARY_DIR}/layering)
set(cases "")
foreach(layer IN LISTS layers)
  foreach(upper IN LISTS layers)
    if(upper STREQUAL layer OR upper IN_LIST below_${layer})
      continue()
    endif()
    set(header minidl/${upper}/${probe_${upper}})
    if(NOT EXISTS ${PROJECT_SOURCE_DIR}/${upper}/${probe_${upper}})
      message(FATAL_ERROR "cmake/MinidlLayeringTest.cmake: probe header ${upper}/${probe_${upper}} is gone; name another")
    endif()
    file(WRITE ${probe_dir}/${layer}_includes_${upper}.cpp "#include \"${header}\"\n")
    list(APPEND cases "${layer}:${upper}:${header}")
  endforeach()
endforeach()

set(args "")
foreach(layer IN LISTS layers)
  list(APPEND args "-DINCLUDES_${layer}=$<JOIN:$<TARGET_PROPERTY:minidl_${layer},INCLUDE_DIRECTORIES>,|>"
                   "-DDEFINES_${layer}=$<JOIN:$<TARGET_PROPERTY:minidl_${layer},COMPILE_DEFINITIONS>,|>")
endforeach()
string(REPLACE ";" "|" cases_arg "${cases}")
string(REPLACE ";" "|" layers_arg "${layers}")
add_test(NAME layering_refuses_upward_includes
         COMMAND ${CMAKE_COMMAND} -DCXX=${CMAKE_CXX_COMPILER} -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
                 -DPROBE_DIR=${probe_dir} -DLAYERS=${layers_arg} -DCASES=${cases_arg} ${args}
                 -P ${PROJECT_SOURCE_DIR}/cmake/check_layering.cmake)
