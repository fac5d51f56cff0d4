// The HTML report in a real browser (issue 12): headless Chromium renders a real report, the
// screenshot must not be blank, and the DOM it dumps must hold every chart the report has.
//
// Chromium must fetch nothing: it runs in an empty network namespace when the test is root
// (nothing can leave it), every host name resolves to nothing and the proxy is a closed local
// port; and the page's own Content-Security-Policy forbids fetches. The browser's net log is
// checked: no request was made on the page's behalf, and every request the browser made for
// itself (its component updater ignores --disable-component-update) failed.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "core/json.h"
#include "core/process.h"
#include "core/test_temp_dir.h"
#include "reports/charts.h"
#include "reports/test_reports.h"
#include "reports/writers.h"

namespace sandgate::reports {
namespace {

std::string chromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The pixels of an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes): enough of
// the format to count colours (RFC 2083: chunks, zlib-compressed scanlines, five filters).
struct Image {
  uint32_t width = 0, height = 0;
  std::vector<uint32_t> rgb;  // 0xRRGGBB per pixel
};

uint32_t be32(const std::string& s, size_t at) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(s[at + i])); };
  return b(0) << 24 | b(1) << 16 | b(2) << 8 | b(3);
}

std::optional<Image> decode_png(const std::string& png, std::string* why) {
  if (png.size() < 8 || png.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) {
    *why = "not a PNG";
    return std::nullopt;
  }
  Image img;
  int colour_type = -1, depth = 0, interlace = 0;
  std::string idat;
  for (size_t at = 8; at + 12 <= png.size();) {
    uint32_t len = be32(png, at);
    std::string type = png.substr(at + 4, 4);
    if (at + 12 + len > png.size()) break;
    std::string data = png.substr(at + 8, len);
    if (type == "IHDR") {
      img.width = be32(data, 0);
      img.height = be32(data, 4);
      depth = static_cast<unsigned char>(data[8]);
      colour_type = static_cast<unsigned char>(data[9]);
      interlace = static_cast<unsigned char>(data[12]);
    } else if (type == "IDAT") {
      idat += data;
    }
    at += 12 + len;
  }
  if (depth != 8 || (colour_type != 2 && colour_type != 6) || interlace != 0) {
    *why = "unsupported PNG: depth " + std::to_string(depth) + ", colour type " +
           std::to_string(colour_type) + ", interlace " + std::to_string(interlace);
    return std::nullopt;
  }
  const size_t bpp = colour_type == 6 ? 4 : 3, stride = img.width * bpp;
  std::string raw((stride + 1) * img.height, '\0');
  uLongf raw_len = raw.size();
  if (uncompress(reinterpret_cast<Bytef*>(raw.data()), &raw_len,
                 reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK ||
      raw_len != raw.size()) {
    *why = "the image data does not inflate to its size";
    return std::nullopt;
  }
  std::vector<unsigned char> prev(stride, 0), row(stride);
  for (uint32_t y = 0; y < img.height; ++y) {
    const auto* in = reinterpret_cast<const unsigned char*>(raw.data()) + y * (stride + 1);
    int filter = in[0];
    for (size_t x = 0; x < stride; ++x) {
      int a = x >= bpp ? row[x - bpp] : 0, b = prev[x], c = x >= bpp ? prev[x - bpp] : 0;
      int pred = 0;
      switch (filter) {
        case 0:
          pred = 0;
          break;
        case 1:
          pred = a;
          break;
        case 2:
          pred = b;
          break;
        case 3:
          pred = (a + b) / 2;
          break;
        case 4: {
          int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default:
          *why = "bad filter " + std::to_string(filter);
          return std::nullopt;
      }
      row[x] = static_cast<unsigned char>(in[1 + x] + pred);
    }
    for (uint32_t x = 0; x < img.width; ++x)
      img.rgb.push_back(row[x * bpp] << 16 | row[x * bpp + 1] << 8 | row[x * bpp + 2]);
    prev = row;
  }
  return img;
}

struct Browser {
  std::string output;  // stdout and stderr
  int status = -1;
};

// Chromium, headless, on a local file, with a private profile and no way to the network.
Browser run_chromium(const sandgate::testing::TempDir& dir, const std::vector<std::string>& extra,
                     const std::string& file) {
  std::vector<std::string> argv;
  const bool root = ::geteuid() == 0;
  if (root) argv = {"unshare", "--net"};  // an empty network namespace: nothing leaves it
  argv.insert(argv.end(),
              {chromium(), "--headless", "--disable-gpu", "--user-data-dir=" + dir / "profile",
               "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--disable-extensions",
               "--disable-default-apps", "--no-pings", "--disable-domain-reliability",
               "--disable-client-side-phishing-detection", "--allow-browser-signin=false",
               "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,Translate,"
               "MediaRouter,AutofillServerCommunication",
               "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
               "--log-net-log=" + dir / "netlog.json"});
  // Chromium's own sandbox needs an unprivileged user; as root it refuses to start without this.
  if (root) argv.push_back("--no-sandbox");
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back("file://" + file);
  Browser b;
  auto r = run_command(argv, std::chrono::seconds(120), 16 << 20);
  if (!r.ok()) {
    b.output = r.error().message();
    return b;
  }
  b.output = r->output;
  b.status = r->status.shell_code();
  return b;
}

// Every URL request in Chromium's net log: none made for the page, none that succeeded.
void expect_nothing_fetched(const std::string& netlog_path) {
  auto log = read_json_file(netlog_path);
  ASSERT_TRUE(log.ok()) << log.error().message();
  std::map<int, std::string> types;
  for (const auto& [name, id] : (*log)["constants"]["logEventTypes"].items())
    types[id.get<int>()] = name;
  std::map<int, std::string> url_of;  // source id -> URL
  size_t requests = 0, for_page = 0, got_through = 0;
  for (const auto& e : (*log)["events"]) {
    const std::string& type = types[e["type"].get<int>()];
    if (type != "URL_REQUEST_START_JOB") continue;
    const Json& p = e.value("params", Json::object());
    int source = e["source"]["id"].get<int>();
    if (p.contains("url")) {
      ++requests;
      std::string url = p["url"].get<std::string>();
      url_of[source] = url;
      // The page is a file:// document (an opaque origin, "null"); the browser's own
      // background requests carry "not an origin".
      for_page += p.value("initiator", "") != "not an origin";
      EXPECT_EQ(p.value("initiator", ""), "not an origin")
          << "a request on the page's behalf: " << url;
      EXPECT_EQ(url.rfind("file:", 0), std::string::npos) << url;
    } else if (p.contains("net_error")) {
      got_through += p["net_error"].get<int>() == 0;
      EXPECT_NE(p["net_error"].get<int>(), 0) << "a request got through: " << url_of[source];
    }
  }
  std::cout << "browser check: net log: " << requests << " request(s), " << for_page
            << " for the page, " << got_through << " that got through\n";
}

TEST(BrowserCheck, ChromiumRendersTheReportWithEveryChart) {
  SANDGATE_REQUIRE(!chromium().empty(),
                   "needs chromium (Debian package; ci/bootstrap installs it)");
  Report report = testing::real_report();
  auto charts = charts_for(report);
  std::vector<std::string> ids;
  for (const auto& c : charts) ids.push_back(c.id);
  // A real qualify report with probes, costs and a replay has all four charts.
  ASSERT_EQ(
      ids, (std::vector<std::string>{"probe-matrix", "run-costs", "call-costs", "replay-summary"}));
  sandgate::testing::TempDir dir;
  std::string html = dir / "report.html";
  ASSERT_TRUE(write_report_file(html, render_html(report)).ok());

  // The screenshot: decoded, it must not be one colour (a blank or failed page).
  const std::string png = dir / "shot.png";
  Browser shot = run_chromium(dir, {"--screenshot=" + png, "--window-size=1200,1600"}, html);
  ASSERT_EQ(shot.status, 0) << shot.output;
  std::string bytes = read_file(png);
  std::string why;
  auto img = decode_png(bytes, &why);
  ASSERT_TRUE(img) << why;
  EXPECT_EQ(img->width, 1200u);
  EXPECT_EQ(img->height, 1600u);
  std::set<uint32_t> colours(img->rgb.begin(), img->rgb.end());
  size_t not_white = 0, red = 0, green = 0;
  for (uint32_t px : img->rgb) {
    not_white += px != 0xFFFFFF;
    red += px == 0xC62828;    // an exposed cell (host_dir)
    green += px == 0x2E7D32;  // a blocked cell (namespaces)
  }
  std::cout << "browser check: screenshot " << bytes.size() << " bytes, " << img->width << "x"
            << img->height << ", " << colours.size() << " colours, " << not_white
            << " non-white pixels, " << red << " exposed-red and " << green
            << " blocked-green pixels\n";
  EXPECT_GT(colours.size(), 64u);              // a hidden page: its scrollbar alone has ~20
  EXPECT_GT(not_white, img->rgb.size() / 50);  // more than 2% of the page is drawn
  // The probe matrix is on screen: both verdict colours are painted.
  EXPECT_GT(red, 500u);
  EXPECT_GT(green, 500u);
  expect_nothing_fetched(dir / "netlog.json");

  // The DOM after layout: every chart, with its cells.
  std::filesystem::remove_all(dir / "profile");
  Browser dom = run_chromium(dir, {"--dump-dom"}, html);
  ASSERT_EQ(dom.status, 0) << dom.output;
  for (const auto& id : ids)
    EXPECT_NE(dom.output.find("<svg id=\"" + id + "\""), std::string::npos)
        << id << " not in the DOM";
  size_t cells = 0;
  for (size_t at = dom.output.find("class=\"exposed\"><title>"); at != std::string::npos;
       at = dom.output.find("class=\"exposed\"><title>", at + 1))
    ++cells;
  EXPECT_EQ(cells, 7u) << "host_dir's 7 exposed cells in the matrix";
  expect_nothing_fetched(dir / "netlog.json");
}

// A report with the replay's and the plan's sections too: their charts are drawn, on screen,
// and in the DOM after layout with their series and marks.
TEST(BrowserCheck, ChromiumRendersTheReplayAndPlanCharts) {
  SANDGATE_REQUIRE(!chromium().empty(),
                   "needs chromium (Debian package; ci/bootstrap installs it)");
  Report report = testing::real_report();
  report.replay = testing::synthetic_replay();
  report.plan = testing::synthetic_plan();
  std::vector<std::string> ids;
  for (const auto& c : charts_for(report)) ids.push_back(c.id);
  const std::vector<std::string> added = {"capacity-curve",   "victim-latency",
                                          "burst-timeline-1", "burst-timeline-2",
                                          "burst-timeline-3", "burst-timeline-4"};
  for (const auto& id : added)
    EXPECT_NE(std::find(ids.begin(), ids.end(), id), ids.end()) << id << " not drawn";
  sandgate::testing::TempDir dir;
  std::string html = dir / "report.html";
  ASSERT_TRUE(write_report_file(html, render_html(report)).ok());

  // A tall window: the new charts are below the probe matrix and the costs.
  const std::string png = dir / "shot.png";
  Browser shot = run_chromium(dir, {"--screenshot=" + png, "--window-size=1200,4800"}, html);
  ASSERT_EQ(shot.status, 0) << shot.output;
  std::string bytes = read_file(png);
  std::string why;
  auto img = decode_png(bytes, &why);
  ASSERT_TRUE(img) << why;
  std::set<uint32_t> colours(img->rgb.begin(), img->rgb.end());
  size_t not_white = 0, curve_blue = 0;
  for (uint32_t px : img->rgb) {
    not_white += px != 0xFFFFFF;
    curve_blue += px == 0x1565C0;  // the first model's curve, the memory lines, the cost bars
  }
  std::cout << "browser check (replay + plan): screenshot " << bytes.size() << " bytes, "
            << img->width << "x" << img->height << ", " << colours.size() << " colours, "
            << not_white << " non-white pixels, " << curve_blue << " series-blue pixels\n";
  EXPECT_GT(colours.size(), 64u);
  EXPECT_GT(not_white, img->rgb.size() / 50);
  EXPECT_GT(curve_blue, 2000u);
  expect_nothing_fetched(dir / "netlog.json");

  std::filesystem::remove_all(dir / "profile");
  Browser dom = run_chromium(dir, {"--dump-dom"}, html);
  ASSERT_EQ(dom.status, 0) << dom.output;
  for (const auto& id : ids)
    EXPECT_NE(dom.output.find("<svg id=\"" + id + "\""), std::string::npos)
        << id << " not in the DOM";
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = dom.output.find(what); at != std::string::npos;
         at = dom.output.find(what, at + 1))
      ++n;
    return n;
  };
  // 3 model curves + 2 lines per timeline x 4; 3 fit dots; 2 victim distributions; 3 calls and
  // 2 ladder actions per timeline.
  EXPECT_EQ(count("class=\"series\""), 3u + 2 * 4);
  EXPECT_EQ(count("class=\"fit\""), 3u);
  EXPECT_EQ(count("class=\"threshold\""), 1u);
  EXPECT_EQ(count("class=\"distribution\""), 2u);
  EXPECT_EQ(count("class=\"call\""), 3u * 4);
  EXPECT_EQ(count("class=\"action\""), 2u * 4);
  expect_nothing_fetched(dir / "netlog.json");
}

}  // namespace
}  // namespace sandgate::reports

namespace sandgate::reports {
namespace {

// The hostile report, parsed by a real HTML parser: what the sandbox wrote stays text. Had a
// writer let "<script>" or "<img onerror>" through, the DOM Chromium dumps would hold the
// element.
TEST(BrowserCheck, HostileTextStaysTextInTheBrowser) {
  SANDGATE_REQUIRE(!chromium().empty(),
                   "needs chromium (Debian package; ci/bootstrap installs it)");
  sandgate::testing::TempDir dir;
  std::string html = dir / "report.html";
  ASSERT_TRUE(write_report_file(html, render_html(testing::hostile_report())).ok());
  Browser dom = run_chromium(dir, {"--dump-dom"}, html);
  ASSERT_EQ(dom.status, 0) << dom.output;
  auto body = dom.output.find("<body>");
  ASSERT_NE(body, std::string::npos) << dom.output.substr(0, 2000);
  std::string page = dom.output.substr(body);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("<img"), std::string::npos);
  EXPECT_EQ(page.find("<!--"), std::string::npos);
  EXPECT_NE(page.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(page.find("<svg id=\"probe-matrix\""), std::string::npos);
  expect_nothing_fetched(dir / "netlog.json");
}

}  // namespace
}  // namespace sandgate::reports
