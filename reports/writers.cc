#include "reports/writers.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

#include "core/defer.h"
#include "core/fd.h"
#include "core/json.h"

namespace sandgate::reports {

const std::vector<Format>& all_formats() {
  static const std::vector<Format> kAll = {Format::kJson, Format::kHtml, Format::kJunit,
                                           Format::kSarif, Format::kMarkdown};
  return kAll;
}

Result<Format> parse_format(const std::string& name) {
  if (name == "json") return Format::kJson;
  if (name == "html") return Format::kHtml;
  if (name == "junit") return Format::kJunit;
  if (name == "sarif") return Format::kSarif;
  if (name == "md" || name == "markdown") return Format::kMarkdown;
  return logic_error("--format",
                     "expected html, junit, sarif, md or json; got \"" + name.substr(0, 40) + "\"");
}

std::string default_file_name(Format f) {
  switch (f) {
    case Format::kJson:
      return "report.json";
    case Format::kHtml:
      return "report.html";
    case Format::kJunit:
      return "junit.xml";
    case Format::kSarif:
      return "report.sarif";
    case Format::kMarkdown:
      return "summary.md";
  }
  return "report";
}

std::string render_json(const Report& r) { return dump_json(to_json(r), 1) + "\n"; }

std::string render(const Report& r, Format f) {
  switch (f) {
    case Format::kJson:
      return render_json(r);
    case Format::kHtml:
      return render_html(r);
    case Format::kJunit:
      return render_junit(r);
    case Format::kSarif:
      return render_sarif(r);
    case Format::kMarkdown:
      return render_markdown(r);
  }
  return "";
}

Status write_report_file(const std::string& path, std::string_view text) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  // Reports are read by people and CI uploaders, not only by root: 0644.
  SG_ASSIGN_OR_RETURN(UniqueFd fd, open_fd(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  Defer remove_tmp([&] { ::unlink(tmp.c_str()); });
  SG_TRY(write_all(fd.get(), text));
  if (::fsync(fd.get()) != 0) return sys_error("fsync", tmp);
  fd.reset();
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return sys_error("rename", tmp);
  remove_tmp.cancel();
  return {};
}

Status write_all_formats(const Report& r, const std::string& dir) {
  for (Format f : all_formats())
    SG_TRY(write_report_file(dir + "/" + default_file_name(f), render(r, f)));
  return {};
}

}  // namespace sandgate::reports
