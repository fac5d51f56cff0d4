# sandgate_host: the plain-Linux host feature checks (PSI, user namespaces, seccomp, tools,
# KVM) that `sandgate doctor` and the providers ask about. They belong to core/ but are built
# as their own small library, included from controller/CMakeLists.txt, until these lines can
# move into core/CMakeLists.txt (being edited by someone else while this was written).
add_library(sandgate_host STATIC
  ${CMAKE_CURRENT_LIST_DIR}/host_features.cc ${CMAKE_CURRENT_LIST_DIR}/kvm_check.cc)
target_link_libraries(sandgate_host PUBLIC sandgate_core PkgConfig::SECCOMP)

if(SANDGATE_BUILD_TESTS)
  sandgate_test(host_test SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/host_features_test.cc ${CMAKE_CURRENT_LIST_DIR}/kvm_check_test.cc
    LIBS sandgate_host)
endif()
