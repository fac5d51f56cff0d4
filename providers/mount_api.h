// The new mount API's calls (fsopen(2), fsconfig(2); Linux 5.2), which glibc 2.36 does not wrap.
// One definition for every provider that builds a filesystem with them (the workspace's overlay
// and ext4 image, the jail's shared /etc/alternatives).
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

namespace sandgate::providers {

inline long fsopen_(const char* name, unsigned flags) { return ::syscall(SYS_fsopen, name, flags); }
inline long fsconfig_(int fd, unsigned cmd, const char* key, const void* value, int aux = 0) {
  return ::syscall(SYS_fsconfig, fd, cmd, key, value, aux);
}

}  // namespace sandgate::providers
