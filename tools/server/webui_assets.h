// The chat page's files (tools/server/webui/), embedded in the binary at build time by
// cmake/embed_assets.cmake so that `phi4mm serve` needs no files beside it and nothing from the
// internet. The generated table lives in the build tree.
#pragma once

#include <string_view>
#include <vector>

namespace phi4mm::server {

struct WebAsset {
  std::string_view name;   // file name under tools/server/webui/, e.g. "app.js"
  std::string_view etag;   // 16 hex digits of the file's SHA-256
  std::string_view bytes;  // the file as it is in the repository
};

const std::vector<WebAsset>& WebAssets();

}  // namespace phi4mm::server
