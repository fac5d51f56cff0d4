// fmt and spdlog, compiled once into a static library (sandgate_logging, core/CMakeLists.txt)
// from the headers Debian ships with them.
//
// Why not Debian's libfmt.so and libspdlog.so: every process the project starts per run (the
// run's supervisor, its /proc views server, the sandgate command itself) then maps and
// relocates them and the shared libstdc++ they pull in, and on a VM a page fault is dear
// (measured: the supervisor's start 6.0 -> 3.5 ms, 166 -> 95 page faults). Debian ships no
// static archives of either, but both libraries are built exactly like this: their own
// sources are these implementation headers, compiled with SPDLOG_COMPILED_LIB (whose headers
// then only declare what is defined here), plus the explicit instantiations below of the
// templates that their headers declare `extern` or only declare.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {
template FMT_API auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template FMT_API auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;
template FMT_API locale_ref::locale_ref(const std::locale& loc);
template FMT_API auto locale_ref::get<std::locale>() const -> std::locale;
template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API void buffer<char>::append(const char*, const char*);
template FMT_API void vformat_to(buffer<char>&, string_view,
                                 basic_format_args<FMT_BUFFER_CONTEXT(char)>, locale_ref);
}  // namespace detail
FMT_END_NAMESPACE

#include <spdlog/common-inl.h>
#include <spdlog/details/backtracer-inl.h>
#include <spdlog/details/console_globals.h>
#include <spdlog/details/log_msg-inl.h>
#include <spdlog/details/log_msg_buffer-inl.h>
#include <spdlog/details/null_mutex.h>
#include <spdlog/details/os-inl.h>
#include <spdlog/details/periodic_worker-inl.h>
#include <spdlog/details/registry-inl.h>
#include <spdlog/logger-inl.h>
#include <spdlog/pattern_formatter-inl.h>
#include <spdlog/sinks/ansicolor_sink-inl.h>
#include <spdlog/sinks/base_sink-inl.h>
#include <spdlog/sinks/sink-inl.h>
#include <spdlog/sinks/stdout_color_sinks-inl.h>
#include <spdlog/sinks/stdout_sinks-inl.h>
#include <spdlog/spdlog-inl.h>

#include <mutex>

namespace spdlog {
template class sinks::base_sink<std::mutex>;
template class sinks::base_sink<details::null_mutex>;
template class sinks::ansicolor_sink<details::console_mutex>;
template class sinks::ansicolor_sink<details::console_nullmutex>;
template class sinks::ansicolor_stdout_sink<details::console_mutex>;
template class sinks::ansicolor_stdout_sink<details::console_nullmutex>;
template class sinks::ansicolor_stderr_sink<details::console_mutex>;
template class sinks::ansicolor_stderr_sink<details::console_nullmutex>;
template std::shared_ptr<logger> stdout_color_mt<synchronous_factory>(const std::string&,
                                                                      color_mode);
template std::shared_ptr<logger> stdout_color_st<synchronous_factory>(const std::string&,
                                                                      color_mode);
template std::shared_ptr<logger> stderr_color_mt<synchronous_factory>(const std::string&,
                                                                      color_mode);
template std::shared_ptr<logger> stderr_color_st<synchronous_factory>(const std::string&,
                                                                      color_mode);
}  // namespace spdlog
