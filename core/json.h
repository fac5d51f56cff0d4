// JSON helpers: nlohmann::json at the parse boundary, turning its exceptions into Errors that
// name the source, line and column.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "core/result.h"

namespace sandgate {

using Json = nlohmann::json;

// What a value is, short, for "expected X, got Y" in strict-parsing errors: "an object",
// "an array", "null", or the value itself cut at 60 characters.
std::string describe_json(const Json& j);

// Parses text; an error names `source` with line and column of the fault.
Result<Json> parse_json(std::string_view text, const std::string& source);
Result<Json> read_json_file(const std::string& path);
enum class Durability {
  kSynced,     // fsync before rename: survives a power loss (reports)
  kCrashSafe,  // rename only: survives a crash of this process, not of the machine (run records)
};
// Writes path atomically (temporary file in the same directory, [fsync,] rename).
Status write_json_file_atomic(const std::string& path, const Json& value,
                              Durability durability = Durability::kSynced);

}  // namespace sandgate
