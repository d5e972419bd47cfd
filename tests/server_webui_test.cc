// The chat page's routes (tools/server/routes_webui.cc): / and /ui/<file> serve the files of
// tools/server/webui/ byte for byte from the binary, each with the Content-Security-Policy, nosniff
// and an ETag that answers If-None-Match with 304; the page is public on a server with API keys
// (the API is not); --no-webui (ServerOptions::webui = false) removes it. The page's behaviour in a
// browser is tested by tests/browser (Selenium, scripts/browser_tests.sh).
#include <filesystem>

#include "server/webui_assets.h"
#include "server_test_util.h"

namespace phi4mm::test {
namespace {

namespace fs = std::filesystem;

fs::path WebUiDir() { return fs::path(FixturePath("")) / ".." / ".." / "tools" / "server" / "webui"; }

std::string PathOf(std::string_view name) { return name == "index.html" ? "/" : "/ui/" + std::string(name); }

TestServer& Shared() {
  static TestServer* s = new TestServer(StartTestServer());
  return *s;
}

TEST(ServerWebUi, EveryFileOfTheFolderIsEmbeddedAndServedAsItIs) {
  std::vector<std::string> on_disk;
  for (const auto& e : fs::directory_iterator(WebUiDir())) on_disk.push_back(e.path().filename().string());
  std::sort(on_disk.begin(), on_disk.end());
  std::vector<std::string> embedded;
  for (const server::WebAsset& a : server::WebAssets()) embedded.emplace_back(a.name);
  EXPECT_EQ(embedded, on_disk);
  for (const std::string& name : on_disk) {
    auto r = Get(Shared().port, PathOf(name));
    ASSERT_EQ(r.status, 200) << name;
    EXPECT_EQ(r.body, ReadFile((WebUiDir() / name).string())) << name;
  }
}

TEST(ServerWebUi, TypesPolicyAndRevalidation) {
  const std::vector<std::pair<std::string, std::string>> types = {{"/", "text/html; charset=utf-8"},
                                                                  {"/ui/app.js", "text/javascript; charset=utf-8"},
                                                                  {"/ui/style.css", "text/css; charset=utf-8"},
                                                                  {"/ui/icon.svg", "image/svg+xml"}};
  for (const auto& [path, type] : types) {
    auto r = Get(Shared().port, path);
    ASSERT_EQ(r.status, 200) << path;
    EXPECT_EQ(r.header("Content-Type"), type) << path;
    const std::string csp = r.header("Content-Security-Policy");
    EXPECT_NE(csp.find("default-src 'none'"), std::string::npos) << csp;
    EXPECT_NE(csp.find("script-src 'self';"), std::string::npos) << csp;
    EXPECT_EQ(csp.find("unsafe"), std::string::npos) << csp;
    EXPECT_EQ(r.header("X-Content-Type-Options"), "nosniff");
    EXPECT_EQ(r.header("Cache-Control"), "no-cache");  // replaces the API's no-store
    const std::string etag = r.header("ETag");
    ASSERT_EQ(etag.size(), 18u) << etag;
    auto again = Get(Shared().port, path, {{"If-None-Match", "\"0000000000000000\", " + etag}});
    EXPECT_EQ(again.status, 304) << path;
    EXPECT_TRUE(again.body.empty());
    EXPECT_EQ(again.header("Content-Length"), "");
    EXPECT_EQ(again.header("ETag"), etag);
    EXPECT_EQ(Get(Shared().port, path, {{"If-None-Match", "\"0000000000000000\""}}).status, 200);
  }
  EXPECT_EQ(Get(Shared().port, "/ui/").status, 404);
  EXPECT_EQ(Get(Shared().port, "/ui/missing.js").status, 404);
  EXPECT_EQ(Get(Shared().port, "/index.html").status, 404);
  EXPECT_EQ(Post(Shared().port, "/", "{}").status, 405);
  const std::string metrics = Get(Shared().port, "/metrics").body;
  EXPECT_GE(MetricValue(metrics, "phi4mm_requests_total{endpoint=\"webui\",status=\"200\"}"), 4);
}

TEST(ServerWebUi, ThePageIsPublicOnAServerWithAnApiKey) {
  server::ServerOptions so;
  so.api_keys = {"sk-webui-test"};
  TestServer s = StartTestServer(so);
  EXPECT_EQ(Get(s.port, "/").status, 200);
  EXPECT_EQ(Get(s.port, "/ui/app.js").status, 200);
  EXPECT_EQ(Get(s.port, "/v1/models").status, 401);
  EXPECT_EQ(Get(s.port, "/v1/models", {{"Authorization", "Bearer sk-webui-test"}}).status, 200);
}

TEST(ServerWebUi, NoWebUiRemovesThePage) {
  server::ServerOptions so;
  so.webui = false;
  TestServer s = StartTestServer(so);
  EXPECT_EQ(Get(s.port, "/").status, 404);
  EXPECT_EQ(Get(s.port, "/ui/app.js").status, 404);
  EXPECT_EQ(Get(s.port, "/health").status, 200);
}

}  // namespace
}  // namespace phi4mm::test
