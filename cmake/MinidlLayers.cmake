# cmake/MinidlLayers.cmake — minidl_add_layer(): one library target per source folder, each
# seeing only its own headers and those of the layers it links.
#
# A layer's headers are reached as "minidl/<folder>/<file>.h" through an include root of its own,
# <build>/include/<folder>/, holding a single symbolic link minidl/<folder> -> <source>/<folder>.
# The source root itself is on no include path, so a target's include path holds exactly the
# roots of its own layer and of the layers below it (PUBLIC links carry them upwards), and an
# #include of a higher layer's header fails to compile: "minidl/nn/module.h: No such file".
# New files are picked up by the glob (CONFIGURE_DEPENDS) without editing CMake.

set(MINIDL_INCLUDE_ROOT ${PROJECT_BINARY_DIR}/include)

# minidl_link_include_root(<name> <source path>): <build>/include/<name>/minidl/<file name> ->
# <source path>; returns the root directory in MINIDL_LAST_ROOT.
function(minidl_link_include_root name source)
  get_filename_component(leaf ${source} NAME)
  set(root ${MINIDL_INCLUDE_ROOT}/${name})
  file(MAKE_DIRECTORY ${root}/minidl)
  file(CREATE_LINK ${source} ${root}/minidl/${leaf} SYMBOLIC)
  set(MINIDL_LAST_ROOT ${root} PARENT_SCOPE)
endfunction()

# minidl_add_layer(<folder> [DEPENDS <lower folder>...]): target minidl_<folder> (exported and
# aliased as minidl::<folder>) from <folder>/**/*.cpp; in CUDA builds also <folder>/cuda/*.cu and
# *.cpp, otherwise <folder>/cuda_stub.cpp when present. Its headers install to
# include/minidl/<folder>/.
function(minidl_add_layer folder)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "DEPENDS")
  set(dir ${PROJECT_SOURCE_DIR}/${folder})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${dir}/*.cpp)
  list(FILTER sources EXCLUDE REGEX "/cuda/|cuda_stub.cpp$")
  if(MINIDL_HAVE_CUDA)
    file(GLOB_RECURSE cuda_sources CONFIGURE_DEPENDS ${dir}/cuda/*.cu ${dir}/cuda/*.cpp)
    list(APPEND sources ${cuda_sources})
  elseif(EXISTS ${dir}/cuda_stub.cpp)
    list(APPEND sources ${dir}/cuda_stub.cpp)
  endif()

  set(target minidl_${folder})
  add_library(${target} ${sources})
  add_library(minidl::${folder} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${folder})
  target_compile_features(${target} PUBLIC cxx_std_20)  # the headers need C++20: so do users
  minidl_link_include_root(${folder} ${dir})
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${MINIDL_LAST_ROOT}>
                                              $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  foreach(lower IN LISTS arg_DEPENDS)
    target_link_libraries(${target} PUBLIC minidl_${lower})
  endforeach()

  install(TARGETS ${target} EXPORT minidlTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(DIRECTORY ${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/minidl/${folder}
          FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh")
  set_property(GLOBAL APPEND PROPERTY MINIDL_LAYERS ${folder})
  set_property(GLOBAL PROPERTY MINIDL_DEPENDS_${folder} ${arg_DEPENDS})
endfunction()
