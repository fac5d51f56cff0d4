#include "core/json.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE
#include <unistd.h>

#include <cstdio>

#include "core/defer.h"
#include "core/fd.h"
#include "core/strings.h"

namespace sandgate {

std::string json_error_text(const Json::exception& e) {
  std::string_view w = e.what();
  // "[json.exception.parse_error.101] parse error at line 3, column 10: syntax error ...": the
  // tag is for programmers and the position is said by the caller.
  if (w.starts_with("[json.exception.")) {
    if (auto tag_end = w.find("] "); tag_end != std::string_view::npos)
      w.remove_prefix(tag_end + 2);
  }
  if (w.starts_with("parse error")) {
    if (auto colon = w.find(": "); colon != std::string_view::npos) w.remove_prefix(colon + 2);
  }
  // The token nlohmann quotes ("last read: '...'", "number overflow parsing '...'") is input,
  // and may be all of a 50 MB line: quoted as an excerpt. What follows it ("; expected ...") is
  // nlohmann's own text, cut as well in case the token held that text itself.
  size_t open = w.find('\'');
  if (open == std::string_view::npos) return excerpt(w, 400);
  std::string_view head = w.substr(0, open + 1), rest = w.substr(open + 1);
  size_t close = rest.find("'; expected ");
  if (close == std::string_view::npos) close = rest.ends_with('\'') ? rest.size() - 1 : rest.size();
  return excerpt(head, 400) + excerpt(rest.substr(0, close)) + excerpt(rest.substr(close));
}

std::optional<size_t> json_nesting_beyond(std::string_view text, size_t max_depth) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > max_depth) return i;
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
  return std::nullopt;
}

namespace {

// "line L column C" of the byte at `offset` (both from 1, as compilers count), for a person
// reading the file.
std::string line_and_column(std::string_view text, size_t offset) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return "line " + std::to_string(line) + " column " + std::to_string(col);
}

}  // namespace

Result<Json> parse_json(std::string_view text, const std::string& source) {
  if (auto at = json_nesting_beyond(text, kMaxJsonDepth)) {
    return logic_error("parse JSON",
                       line_and_column(text, *at) + ": nested deeper than " +
                           std::to_string(kMaxJsonDepth) + " levels",
                       source);
  }
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    // e.byte counts the characters read, the offending one included: it sits at index
    // e.byte - 1.
    return logic_error("parse JSON",
                       line_and_column(text, e.byte > 0 ? e.byte - 1 : 0) + ": " +
                           json_error_text(e),
                       source);
  } catch (const Json::exception& e) {
    // out_of_range.406, a number too large for a double: nlohmann gives no position.
    return logic_error("parse JSON", json_error_text(e), source);
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
  SG_TRY(std::move(write_all(fd.get(), dump_json(value, 2) + "\n")).context("writing " + tmp));
  if (durability == Durability::kSynced && ::fsync(fd.get()) != 0) return sys_error("fsync", tmp);
  fd.reset();
  if (durability == Durability::kCrashSafe) {
    // Exchanged with the old file rather than renamed over it: ext4 (auto_da_alloc) starts
    // writing back a file renamed over another inside rename(2), which took 0.3 ms at the
    // median and seconds beside a busy disk (a run rewrites its record about six times). The
    // old content, now at `tmp`, is removed with it. A writer killed in between leaves it for
    // gc, as one killed before the rename.
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) == 0) return {};
    // The first write (nothing to exchange with), or a filesystem without exchange.
    if (errno != ENOENT && errno != EINVAL) return sys_error("renameat2 RENAME_EXCHANGE", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return sys_error("rename", tmp);
  remove_tmp.cancel();
  return {};
}

std::string dump_json(const Json& j, int indent) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

namespace {

// One step of a UTF-8 scan at text[i] (RFC 3629: no overlongs, no surrogates, nothing above
// U+10FFFF). Returns how many bytes to consume and sets `valid`: a whole valid sequence, or
// the "maximal subpart" of an invalid one (the longest prefix of some valid sequence, at least
// one byte), which Unicode's best practice and nlohmann's replace handler turn into one U+FFFD.
size_t utf8_step(std::string_view text, size_t i, bool& valid) {
  auto at = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char b = at(i);
  valid = true;
  if (b < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // the range allowed for the second byte
  if (b >= 0xC2 && b <= 0xDF)
    n = 2;
  else if (b == 0xE0)
    n = 3, lo = 0xA0;
  else if (b == 0xED)
    n = 3, hi = 0x9F;
  else if (b >= 0xE1 && b <= 0xEF)
    n = 3;
  else if (b == 0xF0)
    n = 4, lo = 0x90;
  else if (b == 0xF4)
    n = 4, hi = 0x8F;
  else if (b >= 0xF1 && b <= 0xF3)
    n = 4;
  else
    n = 1;  // a continuation byte or 0xC0, 0xC1, 0xF5..0xFF: never valid
  size_t k = 1;
  for (; k < n && i + k < text.size(); ++k) {
    unsigned char c = at(i + k);
    if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) break;
  }
  valid = n > 1 && k == n;
  return k;
}

}  // namespace

size_t make_valid_utf8(std::string& text) {
  // Most output is valid: copy nothing until the first fault.
  size_t i = 0;
  bool valid = true;
  while (i < text.size()) {
    size_t n = utf8_step(text, i, valid);
    if (!valid) break;
    i += n;
  }
  if (i == text.size()) return 0;
  std::string out(text, 0, i);
  out.reserve(text.size() + 16);
  size_t replaced = 0;
  while (i < text.size()) {
    size_t n = utf8_step(text, i, valid);
    if (valid) {
      out.append(text, i, n);
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++replaced;
    }
    i += n;
  }
  text = std::move(out);
  return replaced;
}

void set_text_field(Json& j, const std::string& key, std::string text) {
  size_t replaced = make_valid_utf8(text);
  j[key] = std::move(text);
  j[key + "_invalid_utf8"] = replaced;
}

size_t utf8_safe_cut(std::string_view text, size_t limit) {
  if (limit >= text.size()) return text.size();
  // Step back over at most three continuation bytes to the lead byte of the sequence the cut
  // falls in; cut before it if the sequence does not end at the limit.
  size_t lead = limit;
  for (int k = 0; k < 3 && lead > 0; ++k) {
    unsigned char c = static_cast<unsigned char>(text[lead - 1]);
    if ((c & 0xC0) != 0x80) break;
    --lead;
  }
  if (lead == 0) return limit;
  unsigned char b = static_cast<unsigned char>(text[lead - 1]);
  size_t want = b >= 0xF0 && b <= 0xF4   ? 4
                : b >= 0xE0 && b <= 0xEF ? 3
                : b >= 0xC2 && b <= 0xDF ? 2
                                         : 0;
  size_t have = limit - (lead - 1);
  // A lead byte whose sequence runs past the limit: cut before the lead byte.
  if (want > have) return lead - 1;
  return limit;
}

std::string describe_json(const Json& j) {
  switch (j.type()) {
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::null:
      return "null";
    case Json::value_t::string:
      // The string itself, not a dump of it: a dump would copy all of a 50 MB value first.
      return "\"" + excerpt(j.get_ref<const std::string&>()) + "\"";
    default:
      return excerpt(dump_json(j));  // a number or a boolean: a few bytes
  }
}

}  // namespace sandgate
