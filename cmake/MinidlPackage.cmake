# cmake/MinidlPackage.cmake — what `cmake --install` writes besides the libraries and headers:
# the CMake package (find_package(minidl CONFIG) -> minidl::minidl and minidl::<folder>) and the
# pkg-config file minidl.pc. Both carry the dependencies this build was configured with.
include(CMakePackageConfigHelpers)

set(MINIDL_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/minidl)
get_target_property(MINIDL_LIBRARY_TYPE minidl_kernels TYPE)

install(EXPORT minidlTargets NAMESPACE minidl:: DESTINATION ${MINIDL_CMAKE_DIR})
configure_package_config_file(cmake/minidlConfig.cmake.in ${PROJECT_BINARY_DIR}/minidlConfig.cmake
                              INSTALL_DESTINATION ${MINIDL_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/minidlConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/minidlConfig.cmake ${PROJECT_BINARY_DIR}/minidlConfigVersion.cmake
        DESTINATION ${MINIDL_CMAKE_DIR})

# ---- pkg-config: the same flags by hand ----
set(pc_cflags "-fopenmp")
set(pc_libs "-lminidl_dist -lminidl_data -lminidl_optim -lminidl_nn -lminidl_autograd -lminidl_tensor -lminidl_kernels")
set(pc_private "")
if(MINIDL_HAVE_CUDA)
  string(APPEND pc_cflags " -DMINIDL_WITH_CUDA=1 -I${CUDAToolkit_INCLUDE_DIRS}")
  string(APPEND pc_libs " -L${CUDAToolkit_LIBRARY_DIR} -lcudart -lcublas ${CUDNN_LIBRARY} ${NCCL_LIBRARY}")
endif()
if(Gloo_FOUND)
  get_target_property(gloo_includes gloo INTERFACE_INCLUDE_DIRECTORIES)
  string(APPEND pc_cflags " -DMINIDL_WITH_GLOO=1")
  list(REMOVE_ITEM gloo_includes /usr/include)
  foreach(dir IN LISTS gloo_includes)
    string(APPEND pc_cflags " -I${dir}")
  endforeach()
  string(APPEND pc_libs " -lgloo")
endif()
string(APPEND pc_libs " -fopenmp -pthread")
if(MINIDL_LIBRARY_TYPE STREQUAL "STATIC_LIBRARY")
  # static archives: their own dependencies go on every link line
  string(APPEND pc_libs " -lz")
  if(MINIDL_HAVE_CUDA)
    string(APPEND pc_libs " -Wl,--undefined=minidl_nccl_backend_anchor")
  endif()
else()
  set(pc_private "-lz")
endif()
# relocatable: the prefix is found from the .pc file's own place (cmake --install --prefix P)
file(RELATIVE_PATH pc_to_prefix /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
string(REGEX REPLACE "/$" "" pc_to_prefix "${pc_to_prefix}")
configure_file(cmake/minidl.pc.in ${PROJECT_BINARY_DIR}/minidl.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/minidl.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
