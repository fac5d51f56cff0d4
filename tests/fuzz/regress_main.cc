// The regression driver: a plain main() that feeds every file under the directories it is given
// (a harness's seed corpus, tests/fuzz/corpus/<harness>/, and the inputs that once crashed it,
// tests/fuzz/crashes/<harness>/) to the harness's LLVMFuzzerTestOneInput, once each. It needs no
// libFuzzer, so the normal (gcc, ASan/UBSan) test build runs it in every `make test`: a crash
// that was fixed stays fixed, and every corpus is exercised. A missing directory is an error
// (a typo in CMakeLists would otherwise test nothing); an empty one is not (crashes/ starts so).
//
// Then, with --mutate SECONDS, it fuzzes for that long: each input is a corpus file with a few
// random edits (bytes flipped, set, inserted, deleted, duplicated, spliced from another file,
// and tokens of --dict). No coverage guides it (that is libFuzzer's, `make fuzz`), but it runs
// under the same sanitizers in every `make test`, within CI's budget. The seed is printed
// (--seed replays the same sequence), and an input that crashes is first written to
// --crash-dir, to be checked in under crashes/<harness>/ once fixed.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_check.h"

// ASan's death callback, where ASan is linked in (the dev build; a release build has no
// sanitizer runtime to call).
#if defined(__SANITIZE_ADDRESS__)
#define SANDGATE_HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANDGATE_HAVE_ASAN 1
#endif
#endif
#ifdef SANDGATE_HAVE_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

// UBSan's runtime is a library of its own beside ASan's (gcc) and does not call ASan's death
// callback: make its reports end in abort(), which on_abort below turns into a saved input.
extern "C" const char* __ubsan_default_options() { return "abort_on_error=1:print_stacktrace=1"; }

namespace {

// The input being run and where to save it when it kills the process: read by the death paths
// below, which may only use async-signal-safe calls.
const std::string* g_current = nullptr;
char g_crash_path[4096] = "";

void save_current_input() {
  if (g_current == nullptr || g_crash_path[0] == '\0') return;
  int fd = ::open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const char* p = g_current->data();
  size_t left = g_current->size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n <= 0) break;
    p += n;
    left -= static_cast<size_t>(n);
  }
  ::close(fd);
  static const char kMsg[] = "the crashing input was saved (see 'crash input' above)\n";
  (void)!::write(2, kMsg, sizeof kMsg - 1);
}

// FUZZ_CHECK and UBSan (-fno-sanitize-recover) end in abort(); ASan calls its death callback.
void on_abort(int sig) {
  save_current_input();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

bool read_whole(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return true;
}

// libFuzzer's dictionary format: one "token" per line, with \\, \" and \xNN escapes; lines
// starting with # are comments.
std::vector<std::string> read_dict(const std::string& path) {
  std::vector<std::string> tokens;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    size_t open = line.find('"');
    size_t close = line.rfind('"');
    if (line.empty() || line[0] == '#' || open == std::string::npos || close <= open) continue;
    std::string token;
    for (size_t i = open + 1; i < close; ++i) {
      if (line[i] != '\\' || i + 1 >= close) {
        token += line[i];
      } else if (line[i + 1] == 'x' && i + 3 < close) {
        token += static_cast<char>(std::strtol(line.substr(i + 2, 2).c_str(), nullptr, 16));
        i += 3;
      } else {
        token += line[++i];
      }
    }
    tokens.push_back(token);
  }
  return tokens;
}

// A few random edits of `base`; `others` is the corpus to splice from.
std::string mutate(std::string s, const std::vector<std::string>& others,
                   const std::vector<std::string>& dict, std::mt19937_64& rng) {
  auto below = [&](size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng() % n); };
  static const char kBytes[] = "{}[]:,\"\\0123456789-+.eE \n\t\x00\xff\x7f\xc3";
  int edits = 1 + static_cast<int>(below(4));
  for (int e = 0; e < edits; ++e) {
    size_t at = below(s.size() + 1);
    switch (below(s.empty() ? 3 : 8)) {
      case 0:  // insert a byte that matters to the parsers here
        s.insert(at, 1, kBytes[below(sizeof kBytes - 1)]);
        break;
      case 1:  // insert a dictionary token
        if (!dict.empty()) s.insert(at, dict[below(dict.size())]);
        break;
      case 2: {  // splice a piece of another input
        const std::string& o = others[below(others.size())];
        size_t from = below(o.size()), len = below(std::min<size_t>(o.size() - from, 256) + 1);
        s.insert(at, o, from, len);
        break;
      }
      case 3:  // flip a bit
        s[below(s.size())] ^= static_cast<char>(1u << below(8));
        break;
      case 4:  // set a byte to anything
        s[below(s.size())] = static_cast<char>(below(256));
        break;
      case 5: {  // delete a range
        size_t from = below(s.size());
        s.erase(from, below(std::min<size_t>(s.size() - from, 64) + 1));
        break;
      }
      case 6: {  // duplicate a range (deep nesting, long lines)
        size_t from = below(s.size()), len = below(std::min<size_t>(s.size() - from, 64) + 1);
        std::string piece = s.substr(from, len);
        for (size_t k = 1 + below(16); k > 0; --k) s.insert(from, piece);
        break;
      }
      default:  // replace a digit run's digits with a long one (overflows, precision)
        s.insert(at, std::string(1 + below(40), static_cast<char>('0' + below(10))));
        break;
    }
  }
  return s;
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--mutate SECONDS [--seed N] [--dict FILE] [--crash-dir DIR]] "
               "DIR|FILE...\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  double mutate_seconds = 0;
  uint64_t seed = static_cast<uint64_t>(
      std::chrono::steady_clock::now().time_since_epoch().count() ^ ::getpid());
  std::string dict_path, crash_dir = ".";
  std::vector<std::string> roots;
  for (int a = 1; a < argc; ++a) {
    std::string arg = argv[a];
    bool has_value = a + 1 < argc;
    if (arg == "--mutate" && has_value) {
      mutate_seconds = std::atof(argv[++a]);
    } else if (arg == "--seed" && has_value) {
      seed = std::strtoull(argv[++a], nullptr, 10);
    } else if (arg == "--dict" && has_value) {
      dict_path = argv[++a];
    } else if (arg == "--crash-dir" && has_value) {
      crash_dir = argv[++a];
    } else if (arg.rfind("--", 0) == 0) {
      return usage(argv[0]);
    } else {
      roots.push_back(arg);
    }
  }
  if (roots.empty()) return usage(argv[0]);

  ::signal(SIGABRT, on_abort);
#ifdef SANDGATE_HAVE_ASAN
  __sanitizer_set_death_callback(save_current_input);
#endif

  std::vector<std::string> corpus;
  for (const auto& root : roots) {
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
      std::string bytes;
      if (!read_whole(f, &bytes)) {
        std::fprintf(stderr, "%s: cannot read\n", f.c_str());
        return 2;
      }
      // Printed before the call: if it crashes, the last line names the input.
      std::fprintf(stderr, "input %s (%zu bytes)\n", f.c_str(), bytes.size());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      corpus.push_back(std::move(bytes));
    }
  }
  std::printf("%zu inputs, no crash\n", corpus.size());
  if (corpus.empty()) return 1;  // a harness with nothing to run proves nothing
  if (mutate_seconds <= 0) return 0;

  std::vector<std::string> dict;
  if (!dict_path.empty()) {
    dict = read_dict(dict_path);
    if (dict.empty()) {
      std::fprintf(stderr, "%s: no token read\n", dict_path.c_str());
      return 2;
    }
  }
  std::snprintf(g_crash_path, sizeof g_crash_path, "%s/crash-seed-%llu", crash_dir.c_str(),
                static_cast<unsigned long long>(seed));
  std::fprintf(stderr, "mutating for %.1f s, seed %llu (--seed replays it); crash input: %s\n",
               mutate_seconds, static_cast<unsigned long long>(seed), g_crash_path);
  std::mt19937_64 rng(seed);
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(mutate_seconds));
  uint64_t runs = 0;
  size_t largest = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    std::string input = mutate(corpus[rng() % corpus.size()], corpus, dict, rng);
    largest = std::max(largest, input.size());
    g_current = &input;
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    g_current = nullptr;
    ++runs;
  }
  std::printf("%llu mutated inputs in %.1f s (largest %zu bytes), no crash\n",
              static_cast<unsigned long long>(runs), mutate_seconds, largest);
  return runs == 0 ? 1 : 0;
}
