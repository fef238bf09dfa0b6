# cmake/install.cmake - what `cmake --install` puts where (included by
# CMakeLists.txt once the targets exist):
#
#   include/awl/           awl.h and the headers it includes, in their folders
#                          (nn/gpt.h, tensor/tensor.h, ...): -I<prefix>/include/awl
#   lib/libawl.a           the static library
#   lib/libawl.so.X.Y.Z    the shared library, SONAME libawl.so.X (X the
#                          major version), with the libawl.so link
#   bin/                   train_gpt, generate, awlrun, awl-check
#   lib/pkgconfig/awl.pc   for pkg-config (--static adds the private libraries)
#   lib/cmake/awl/         find_package(awl): awl::awl (shared), awl::awl_static
#
# tests/install/test_install.sh installs a copy and builds a program
# against it both ways.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The public headers: awl.h and every header it includes (the internal
# ones, *_internal.h, stay in the source tree). The install test compiles
# awl.h from the installed copy, so a header missing here fails it.
set(AWL_PUBLIC_HEADERS
  awl.h
  autograd/autograd.h autograd/checkpoint.h
  backends/backend.h backends/ops.h backends/cpu/cpu_blas.h
  common/dropout.h common/dtype.h common/error.h common/philox.h
  data/data.h
  dist/dist.h
  nn/checkpoint_io.h nn/generate.h nn/gpt.h nn/nn.h nn/optim.h nn/param.h nn/safetensors.h
  tensor/profiler.h tensor/tensor.h)
foreach(header ${AWL_PUBLIC_HEADERS})
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/awl/${dir})
endforeach()

set_target_properties(awl PROPERTIES EXPORT_NAME awl_static)
set_target_properties(awl_shared PROPERTIES EXPORT_NAME awl VERSION ${PROJECT_VERSION}
                      SOVERSION ${PROJECT_VERSION_MAJOR})
install(TARGETS awl awl_shared EXPORT awlTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/awl)
install(TARGETS train_gpt generate awlrun awl-check RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

install(EXPORT awlTargets NAMESPACE awl:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/awl)
configure_package_config_file(cmake/awlConfig.cmake.in ${CMAKE_BINARY_DIR}/awlConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/awl)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/awlConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/awlConfig.cmake ${CMAKE_BINARY_DIR}/awlConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/awl)

# awl.pc: the prefix relative to the file, so that `--prefix` at install
# time (not CMAKE_INSTALL_PREFIX at configure time) decides where it points
file(RELATIVE_PATH AWL_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" AWL_PC_TO_PREFIX "${AWL_PC_TO_PREFIX}")
set(AWL_PC_LIBS_PRIVATE "")
if(AWL_WITH_CUDA)
  string(APPEND AWL_PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart -lstdc++")
endif()
if(AWL_WITH_MPI)
  foreach(lib ${MPI_C_LIBRARIES})
    string(APPEND AWL_PC_LIBS_PRIVATE " ${lib}")
  endforeach()
endif()
configure_file(cmake/awl.pc.in ${CMAKE_BINARY_DIR}/awl.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/awl.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
