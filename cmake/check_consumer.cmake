# cmake/check_consumer.cmake — run by ctest `consumer_builds_against_install`:
#   cmake -DBUILD_DIR=... -DWORK_DIR=... -DCONSUMER_DIR=... -DGENERATOR=... -DCXX=... -P this
# 1. cmake --install BUILD_DIR --prefix WORK_DIR/prefix (a fresh one);
# 2. the prefix's include/ holds only minidl/; bin/ holds train, minidl-run and the examples, which run;
# 3. examples/consumer configures (find_package(minidl)), builds and runs, printing "consumer: ok";
# 4. consumer.cpp preprocesses with `pkg-config --cflags minidl`; its object file links with
#    `pkg-config --libs minidl` into a program that runs.
# Any failure: FATAL_ERROR naming the step (non-zero exit).
set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${step} failed (exit ${rc}): ${ARGN}\n${out}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

run("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

file(GLOB top RELATIVE ${prefix}/include ${prefix}/include/*)
if(NOT top STREQUAL "minidl")
  message(FATAL_ERROR "include/ of the install should hold only minidl/, holds: ${top}")
endif()
foreach(header minidl.h tensor/tensor_all.h autograd/autograd_all.h nn/nn_all.h optim/optim_all.h
               data/data_all.h dist/dist_all.h)
  if(NOT EXISTS ${prefix}/include/minidl/${header})
    message(FATAL_ERROR "install lacks include/minidl/${header}")
  endif()
endforeach()
foreach(program train minidl-run 01_tensor_basics 02_autograd 03_custom_module 04_train_single_process
                05_train_data_parallel)
  if(NOT EXISTS ${prefix}/bin/${program})
    message(FATAL_ERROR "install lacks bin/${program}")
  endif()
endforeach()
run("installed train --help" ${prefix}/bin/train --help)
run("installed 02_autograd" ${prefix}/bin/02_autograd)

run("consumer configure" ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix})
run("consumer build" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run("consumer run" ${WORK_DIR}/build/consumer)
message(STATUS "${out}")
if(NOT out MATCHES "consumer: ok")
  message(FATAL_ERROR "consumer printed no 'consumer: ok':\n${out}")
endif()

# pkg-config: consumer.cpp preprocesses with minidl.pc's --cflags, and its object file (compiled by
# CMake above; this saves a second full compile) links with --libs into a program that runs
find_program(PKG_CONFIG pkg-config REQUIRED)
set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
run("pkg-config --cflags" ${PKG_CONFIG} --cflags minidl)
separate_arguments(pc_cflags UNIX_COMMAND "${out}")
run("pkg-config --libs" ${PKG_CONFIG} --libs minidl)
separate_arguments(pc_libs UNIX_COMMAND "${out}")
run("preprocess with pkg-config --cflags" ${CXX} ${pc_cflags} -E -o /dev/null ${CONSUMER_DIR}/consumer.cpp)
file(GLOB_RECURSE object ${WORK_DIR}/build/*consumer.cpp.o)
run("link with pkg-config --libs" ${CXX} ${object} -o ${WORK_DIR}/consumer_pc ${pc_libs} -Wl,-rpath,${prefix}/lib)
run("pkg-config program run" ${WORK_DIR}/consumer_pc)
if(NOT out MATCHES "consumer: ok")
  message(FATAL_ERROR "the pkg-config-linked consumer printed no 'consumer: ok':\n${out}")
endif()
message(STATUS "install, find_package consumer and pkg-config build all ok in ${prefix}")
