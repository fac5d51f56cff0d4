// JSON helpers: nlohmann::json at the parse boundary, turning its exceptions into Errors that
// name the source, line and column.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/result.h"

namespace sandgate {

using Json = nlohmann::json;

// Serialises without ever throwing: bytes that are not valid UTF-8 (a sandbox's output, a
// path, a decoy's request line) become U+FFFD instead of nlohmann's type_error 316, which
// would otherwise end the process. Every JSON sandgate writes goes through this.
std::string dump_json(const Json& j, int indent = -1);

// Replaces each invalid UTF-8 sequence in `text` with U+FFFD (maximal subparts, as Unicode's
// "best practice" and nlohmann's replace handler do), and returns how many were replaced, so a
// writer can say that the text was altered.
size_t make_valid_utf8(std::string& text);

// Sets j[key] to `text` made valid UTF-8 and j[key + "_invalid_utf8"] to the number of
// sequences replaced (0 when none): output a sandbox wrote goes into JSON this way, so that a
// reader can tell the text was altered.
void set_text_field(Json& j, const std::string& key, std::string text);

// The length of the longest prefix of `text` that does not end inside a UTF-8 sequence: where
// to cut a capture so that a limit never splits a character. Bytes that are not a valid
// sequence's beginning are left for make_valid_utf8 to replace.
size_t utf8_safe_cut(std::string_view text, size_t limit);

// What a value is, short, for "expected X, got Y" in strict-parsing errors: "an object",
// "an array", "null", or the value itself as excerpt() quotes it (at most 80 bytes).
std::string describe_json(const Json& j);

// nlohmann's message for a parse failure without its "[json.exception...]" tag and position,
// the input it quotes (the token last read) cut by excerpt(): one short line whatever the input.
std::string json_error_text(const Json::exception& e);

// JSON nested deeper than this is refused by parse_json. nlohmann parses without recursion, but
// copying, comparing and dumping a value recurse once per level: 100,000 nested arrays from a
// sandbox (a probe's evidence, a request's id, a trace's host) would overflow the stack of
// whoever touched the value next. Nothing sandgate reads is nested more than a few levels.
inline constexpr size_t kMaxJsonDepth = 256;

// The offset of the first '[' or '{' (outside strings) that opens a container nested deeper
// than `max_depth`, or nullopt. One pass, no recursion, no allocation; meant for text that is
// then parsed (invalid JSON may give any answer, and the parser says what is wrong with it).
std::optional<size_t> json_nesting_beyond(std::string_view text, size_t max_depth);

// Parses text; an error names `source` with line and column of the fault. Nesting deeper than
// kMaxJsonDepth is an error at the bracket that goes too deep.
Result<Json> parse_json(std::string_view text, const std::string& source);
Result<Json> read_json_file(const std::string& path);
enum class Durability {
  kSynced,     // fsync before rename: survives a power loss (reports)
  kCrashSafe,  // no fsync, the old file exchanged (renameat2 RENAME_EXCHANGE) and removed:
               // survives a crash of this process, not of the machine (run records), where a
               // power loss may leave the file empty
};
// Writes path atomically (temporary file <path>.tmp.<pid> in the same directory, [fsync,]
// rename or exchange).
Status write_json_file_atomic(const std::string& path, const Json& value,
                              Durability durability = Durability::kSynced);

}  // namespace sandgate
