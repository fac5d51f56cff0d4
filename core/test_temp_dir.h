// A private temporary directory for one test, removed with everything in it when the test ends
// (std::filesystem::remove_all, not the code under test, and never following symlinks).
// Test-only: included by core/*_test.cc, not part of sandgate_core.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace sandgate::testing {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    make(base && *base ? base : "/tmp");
  }
  // Under `base` instead of $TMPDIR (a test that needs a particular filesystem: /var/tmp is on
  // disk where /tmp may be tmpfs).
  explicit TempDir(const std::string& base) { make(base); }
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    if (ec) ADD_FAILURE() << "cannot remove " << path_ << ": " << ec.message();
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  void make(const std::string& base) {
    std::string tmpl = base + "/sandgate-core-test.XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp " << tmpl << " failed";
      return;
    }
    path_ = tmpl;
  }

  std::string path_;
};

}  // namespace sandgate::testing
