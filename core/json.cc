#include "core/json.h"

#include <unistd.h>

#include <cstdio>

#include "core/fd.h"

namespace sandgate {

Result<Json> parse_json(std::string_view text, const std::string& source) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    // Translate the byte offset into line:column for a person reading the file.
    size_t line = 1, col = 1;
    for (size_t i = 0; i < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    std::string what = e.what();
    auto pos = what.find("parse error");
    return logic_error("parse JSON",
                       "line " + std::to_string(line) + " column " + std::to_string(col) + ": " +
                           (pos == std::string::npos ? what : what.substr(pos)),
                       source);
  }
}

Result<Json> read_json_file(const std::string& path) {
  SG_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_json(text, path);
}

Status write_json_file_atomic(const std::string& path, const Json& value) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    SG_ASSIGN_OR_RETURN(UniqueFd fd, open_fd(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600));
    SG_TRY(write_all(fd.get(), value.dump(2) + "\n"));
    if (::fsync(fd.get()) != 0) return sys_error("fsync", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    Error e = sys_error("rename", tmp);
    ::unlink(tmp.c_str());
    return e;
  }
  return {};
}

}  // namespace sandgate
