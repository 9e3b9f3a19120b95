# cmake/MinidlConsumerTest.cmake — ctest `consumer_builds_against_install`: installs this build
# into a fresh prefix, then configures, builds and runs examples/consumer/ (find_package(minidl))
# against it, and checks the pkg-config file and the installed programs
# (cmake/check_consumer.cmake). A broken install rule fails it.
add_test(NAME consumer_builds_against_install
         COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${PROJECT_BINARY_DIR} -DWORK_DIR=${PROJECT_BINARY_DIR}/consumer_test
                 -DCONSUMER_DIR=${PROJECT_SOURCE_DIR}/examples/consumer -DGENERATOR=${CMAKE_GENERATOR}
                 -DCXX=${CMAKE_CXX_COMPILER}
                 -P ${PROJECT_SOURCE_DIR}/cmake/check_consumer.cmake)
set_tests_properties(consumer_builds_against_install PROPERTIES TIMEOUT 600)
