#include "core/proc_cgroup.h"

#include "core/strings.h"

namespace sandgate {

std::string cgroup_path_in(std::string_view table, std::string_view controller) {
  for (std::string_view line : split(table, '\n')) {
    const size_t first = line.find(':');
    const size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    const std::string_view controllers = line.substr(first + 1, second - first - 1);
    bool match = controller.empty() && controllers.empty();
    if (!controller.empty())
      for (std::string_view c : split(controllers, ',')) match = match || c == controller;
    if (match) return std::string(line.substr(second + 1));
  }
  return "";
}

}  // namespace sandgate
