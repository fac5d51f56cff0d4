#include "core/json.h"

#include <unistd.h>

#include <cstdio>

#include "core/defer.h"
#include "core/fd.h"

namespace sandgate {

Result<Json> parse_json(std::string_view text, const std::string& source) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    // Translate the byte offset into line:column for a person reading the file. e.byte counts
    // the characters read, the offending one included: it sits at index e.byte - 1.
    size_t line = 1, col = 1;
    for (size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    // "[json.exception.parse_error.101] parse error at line 3, column 10: syntax error ...":
    // keep what follows the position, which is already said once.
    std::string what = e.what();
    auto pos = what.find("parse error");
    if (pos != std::string::npos) {
      what = what.substr(pos);
      if (what.starts_with("parse error at line ")) {
        if (auto colon = what.find(": "); colon != std::string::npos) what = what.substr(colon + 2);
      }
    }
    return logic_error("parse JSON",
                       "line " + std::to_string(line) + " column " + std::to_string(col) + ": " +
                           what,
                       source);
  }
}

Result<Json> read_json_file(const std::string& path) {
  SG_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_json(text, path);
}

Status write_json_file_atomic(const std::string& path, const Json& value, Durability durability) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  SG_ASSIGN_OR_RETURN(UniqueFd fd, open_fd(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600));
  // From here on a failure (ENOSPC half way, EIO on fsync) must not leave the temp file behind.
  Defer remove_tmp([&] { ::unlink(tmp.c_str()); });
  SG_TRY(std::move(write_all(fd.get(), value.dump(2) + "\n")).context("writing " + tmp));
  if (durability == Durability::kSynced && ::fsync(fd.get()) != 0) return sys_error("fsync", tmp);
  fd.reset();
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return sys_error("rename", tmp);
  remove_tmp.cancel();
  return {};
}

std::string describe_json(const Json& j) {
  switch (j.type()) {
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::null:
      return "null";
    default: {
      std::string s = j.dump();
      return s.size() > 60 ? s.substr(0, 57) + "..." : s;
    }
  }
}

}  // namespace sandgate
