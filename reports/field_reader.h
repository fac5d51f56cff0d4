// The strict JSON reading the report model and the qualify.json importer share. Internal to
// reports/: a fault is thrown as FieldError and turned into an Error where the reading starts
// (report_from_json, from_qualify), never further.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/json.h"

namespace sandgate::reports::detail {

// A strict reader over one JSON object. A fault is thrown as FieldError and turned into an
// Error at report_from_json: the model is a tree of a dozen shapes, and threading a Result
// through every field read would bury what is read under how failures travel. Nothing else
// throws it, and it never leaves this file.
struct FieldError {
  std::string path, message;
};

// The path of element i of the array at `path`: "providers[1]", as every error names it.
inline std::string item_path(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

class Reader {
 public:
  Reader(const Json& j, std::string path) : j_(j), path_(std::move(path)) {
    if (!j_.is_object()) fail("", "expected an object, got " + describe_json(j_));
  }
  // Call when every field was read: what is left is unknown.
  void done() const {
    for (const auto& [key, value] : j_.items())
      if (!seen_.count(key)) fail(key, "unknown field");
  }
  bool has(const std::string& key) const { return j_.contains(key); }
  const Json& raw(const std::string& key) {
    if (!j_.contains(key)) fail(key, "missing");
    seen_.insert(key);
    return j_.at(key);
  }
  std::string at(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  // The path of element i of the array at `key`: "providers[1]".
  std::string at(const std::string& key, size_t i) const { return item_path(at(key), i); }

  std::string str(const std::string& key) {
    const Json& v = raw(key);
    if (!v.is_string()) fail(key, "expected a string, got " + describe_json(v));
    return v.get<std::string>();
  }
  std::optional<std::string> opt_str(const std::string& key) {
    if (!has(key)) return std::nullopt;
    return str(key);
  }
  bool boolean(const std::string& key) {
    const Json& v = raw(key);
    if (!v.is_boolean()) fail(key, "expected true or false, got " + describe_json(v));
    return v.get<bool>();
  }
  int integer(const std::string& key) {
    const Json& v = raw(key);
    if (!v.is_number_integer()) fail(key, "expected an integer, got " + describe_json(v));
    return v.get<int>();
  }
  uint64_t count(const std::string& key) {
    const Json& v = raw(key);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      fail(key, "expected a count (integer >= 0), got " + describe_json(v));
    return v.get<uint64_t>();
  }
  double number(const std::string& key) {
    const Json& v = raw(key);
    if (!v.is_number()) fail(key, "expected a number, got " + describe_json(v));
    return v.get<double>();
  }
  std::optional<double> opt_number(const std::string& key) {
    if (!has(key)) return std::nullopt;
    return number(key);
  }
  std::vector<double> numbers(const std::string& key) {
    std::vector<double> out;
    const Json& v = array(key);
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_number())
        fail(key + "[" + std::to_string(i) + "]", "expected a number, got " + describe_json(v[i]));
      out.push_back(v[i].get<double>());
    }
    return out;
  }
  std::vector<std::string> strings(const std::string& key) {
    std::vector<std::string> out;
    const Json& v = array(key);
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string())
        fail(key + "[" + std::to_string(i) + "]", "expected a string, got " + describe_json(v[i]));
      out.push_back(v[i].get<std::string>());
    }
    return out;
  }
  const Json& array(const std::string& key) {
    const Json& v = raw(key);
    if (!v.is_array()) fail(key, "expected an array, got " + describe_json(v));
    return v;
  }
  const Json& object(const std::string& key) {
    const Json& v = raw(key);
    if (!v.is_object()) fail(key, "expected an object, got " + describe_json(v));
    return v;
  }
  [[noreturn]] void fail(const std::string& key, const std::string& message) const {
    throw FieldError{key.empty() ? path_ : at(key), message};
  }

 private:
  const Json& j_;
  std::string path_;
  std::set<std::string> seen_;
};

}  // namespace sandgate::reports::detail

namespace sandgate::reports {
struct Contradiction;
struct PolicyCheck;
struct ReplaySummary;
// Shared by the model's reader and the qualify.json importer (model.cc): the same shapes.
std::vector<Contradiction> contradictions_from(detail::Reader& r, const std::string& key);
PolicyCheck policy_from(const Json& j, const std::string& path);
// The strict reading of a replay summary: the model's and qualify.json's are the same object.
ReplaySummary replay_from(const Json& j, const std::string& path);

}  // namespace sandgate::reports
