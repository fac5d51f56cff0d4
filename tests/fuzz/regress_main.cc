// The regression driver: a plain main() that feeds every file under the directories it is given
// (a harness's seed corpus, tests/fuzz/corpus/<harness>/, and the inputs that once crashed it,
// tests/fuzz/crashes/<harness>/) to the harness's LLVMFuzzerTestOneInput, once each. It needs no
// libFuzzer, so the normal (gcc, ASan/UBSan) test build runs it in every `make test`: a crash
// that was fixed stays fixed, and every corpus is exercised. A missing directory is an error
// (a typo in CMakeLists would otherwise test nothing); an empty one is not (crashes/ starts so).
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_check.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR|FILE...\n", argv[0]);
    return 2;
  }
  size_t inputs = 0;
  for (int a = 1; a < argc; ++a) {
    std::string root = argv[a];
    struct stat st;
    if (::stat(root.c_str(), &st) != 0) {
      std::fprintf(stderr, "%s: no such file or directory\n", root.c_str());
      return 2;
    }
    std::vector<std::string> files;
    if (S_ISDIR(st.st_mode)) {
      DIR* d = ::opendir(root.c_str());
      if (d == nullptr) {
        std::perror(root.c_str());
        return 2;
      }
      while (struct dirent* e = ::readdir(d)) {
        std::string name = e->d_name;
        if (name == "." || name == ".." || name == ".gitkeep") continue;
        files.push_back(root + "/" + name);
      }
      ::closedir(d);
      std::sort(files.begin(), files.end());  // the same order on every run
    } else {
      files.push_back(root);
    }
    for (const auto& f : files) {
      std::ifstream in(f, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "%s: cannot read\n", f.c_str());
        return 2;
      }
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      // Printed before the call: if it crashes, the last line names the input.
      std::fprintf(stderr, "input %s (%zu bytes)\n", f.c_str(), bytes.size());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++inputs;
    }
  }
  std::printf("%zu inputs, no crash\n", inputs);
  return inputs == 0 ? 1 : 0;  // a harness with nothing to run proves nothing
}
