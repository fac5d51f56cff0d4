// Intent inference: which intent a call has when it declares none. The argv (and, for
// `sh -c SCRIPT`, each command of the script) is normalised into texts and the policy's rules
// are tried on them in order. This picks a size of grant, not a security boundary: a call that
// disguises itself (`sh -c 'make; ./miner'`) gets another intent's grant, still under the run
// ceiling, and the same isolation.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <string_view>
#include <utility>

#include "controller/policy.h"
#include "core/strings.h"

namespace sandgate::controller {

namespace {

// Inference regexes see at most this much of each text: libstdc++'s std::regex backtracks
// recursively, and `.*` over a long heredoc can exhaust the stack. A command is recognisable
// from its first few words.
constexpr size_t kMaxInferenceText = 2048;

bool is_assignment(const std::string& w) {
  auto eq = w.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  if (!std::isalpha(static_cast<unsigned char>(w[0])) && w[0] != '_') return false;
  return std::all_of(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(eq), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

std::string base_name(const std::string& w) {
  auto slash = w.rfind('/');
  return slash == std::string::npos ? w : w.substr(slash + 1);
}

// Drops wrappers that do not change what a command is, and shortens an absolute program path.
std::vector<std::string> normalize(std::vector<std::string> words) {
  size_t i = 0;
  while (i < words.size()) {
    const std::string& w = words[i];
    if (is_assignment(w)) {
      ++i;
    } else if (w == "env" || w == "sudo" || w == "time" || w == "nohup" || w == "exec" ||
               w == "command") {
      ++i;
      while (i < words.size() && words[i].size() > 1 && words[i][0] == '-') ++i;  // their flags
    } else if (w == "timeout") {
      ++i;
      while (i < words.size() && words[i].size() > 1 && words[i][0] == '-') {
        bool takes_arg = words[i] == "-s" || words[i] == "-k";
        i += takes_arg ? 2 : 1;
      }
      if (i < words.size()) ++i;  // the duration
    } else {
      break;
    }
  }
  words.erase(words.begin(),
              words.begin() + static_cast<std::ptrdiff_t>(std::min(i, words.size())));
  if (!words.empty() && words[0].starts_with('/')) words[0] = base_name(words[0]);
  return words;
}

std::vector<std::string> split_words(std::string_view text) {
  std::vector<std::string> words;
  std::string cur;
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (!cur.empty()) words.push_back(std::move(cur)), cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) words.push_back(std::move(cur));
  return words;
}

// The commands of a shell script, split at ; & | ( ) and newlines outside quotes. Not a shell
// parser: good enough to find the program each command runs. `2>&1` and `&>` stay redirects.
std::vector<std::string> split_commands(std::string_view script) {
  std::vector<std::string> out;
  std::string cur;
  char quote = 0;
  auto flush = [&] {
    auto words = split_words(cur);
    cur.clear();
    if (!words.empty()) out.push_back(join(words, " "));
  };
  for (size_t i = 0; i < script.size(); ++i) {
    char c = script[i];
    if (quote) {
      if (c == '\\' && quote == '"' && i + 1 < script.size()) {
        cur += c;
        cur += script[++i];
        continue;
      }
      if (c == quote) quote = 0;
      cur += c;
      continue;
    }
    if (c == '\\' && i + 1 < script.size()) {
      cur += c;
      cur += script[++i];
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      cur += c;
      continue;
    }
    bool redirect_amp = c == '&' && ((i > 0 && (script[i - 1] == '>' || script[i - 1] == '<')) ||
                                     (i + 1 < script.size() && script[i + 1] == '>'));
    if ((c == ';' || c == '\n' || c == '|' || c == '&' || c == '(' || c == ')') && !redirect_amp) {
      flush();
      continue;
    }
    cur += c;
  }
  flush();
  return out;
}

// The script of `sh -c SCRIPT`, `bash -lc SCRIPT`, `bash -e -o pipefail -c SCRIPT`.
std::optional<std::string> shell_script(const std::vector<std::string>& words) {
  static const std::set<std::string> kShells = {"sh", "bash", "dash", "zsh", "ksh", "ash"};
  if (words.empty() || !kShells.contains(base_name(words[0]))) return std::nullopt;
  bool dash_c = false;
  size_t i = 1;
  while (i < words.size()) {
    const std::string& w = words[i];
    if (w == "--") {
      ++i;
      break;
    }
    if (w.size() < 2 || (w[0] != '-' && w[0] != '+')) break;
    if (w == "-o" || w == "+o" || w == "-O" || w == "+O") {
      i += 2;
      continue;
    }
    if (w[0] == '-' && w[1] != '-' && w.find('c') != std::string::npos) dash_c = true;
    ++i;
  }
  if (!dash_c || i >= words.size()) return std::nullopt;
  return words[i];
}

}  // namespace

std::vector<std::string> inference_texts(const std::vector<std::string>& argv) {
  std::vector<std::string> texts;
  std::vector<std::string> words = normalize(argv);
  if (words.empty()) return texts;
  if (auto script = shell_script(words)) {
    for (const auto& command : split_commands(*script)) {
      auto w = normalize(split_words(command));
      if (!w.empty()) texts.push_back(join(w, " "));
    }
  }
  texts.push_back(join(words, " "));
  return texts;
}

Result<IntentChoice> choose_intent(const Policy& p, const std::optional<std::string>& declared,
                                   const std::vector<std::string>& argv) {
  if (declared) {
    if (!p.intents.contains(*declared)) {
      std::vector<std::string> known;
      for (const auto& [name, g] : p.intents) known.push_back(name);
      return logic_error("choose intent", "intent '" + *declared + "' is not defined by policy '" +
                                              p.name + "' (known: " + join(known) + ")");
    }
    return IntentChoice{*declared, false, "declared"};
  }
  for (const auto& text : inference_texts(argv)) {
    std::string_view view(text);
    if (view.size() > kMaxInferenceText) view = view.substr(0, kMaxInferenceText);
    for (const auto& r : p.inference) {
      try {
        if (std::regex_search(view.begin(), view.end(), r.regex))
          return IntentChoice{r.intent, true, "rule /" + r.pattern + "/"};
      } catch (const std::regex_error& e) {
        // error_complexity / error_stack on a pathological pattern: that rule cannot decide.
        spdlog::debug("inference rule /{}/ failed on '{}': {}", r.pattern, text, e.what());
      }
    }
  }
  return IntentChoice{"default", true, "no rule matched"};
}

}  // namespace sandgate::controller
