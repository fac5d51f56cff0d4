# sandgate_host: the plain-Linux host feature checks (PSI, user namespaces, seccomp, tools,
# KVM) that `sandgate doctor` and the controller ask about. Included from core/CMakeLists.txt;
# a library of its own because it links libseccomp, which the rest of core does not need.
add_library(sandgate_host STATIC
  ${CMAKE_CURRENT_LIST_DIR}/host_features.cc ${CMAKE_CURRENT_LIST_DIR}/kvm_check.cc)
target_link_libraries(sandgate_host PUBLIC sandgate_core PkgConfig::SECCOMP)

if(SANDGATE_BUILD_TESTS)
  sandgate_test(host_test SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/host_features_test.cc ${CMAKE_CURRENT_LIST_DIR}/kvm_check_test.cc
    LIBS sandgate_host)
endif()
