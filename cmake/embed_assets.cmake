# Writes a C++ source holding the web page's files (tools/server/webui/) as byte arrays, run at
# build time by the rule in CMakeLists.txt: cmake -DOUT=<file.cc> -DDIR=<folder> -P
# embed_assets.cmake. Every file of the folder (sorted by name) becomes one array and one WebAsset
# {name, etag, bytes}; the ETag is the first 16 hex digits of the file's SHA-256, so a browser revalidates cheaply.
file(GLOB FILES RELATIVE "${DIR}" "${DIR}/*")
list(SORT FILES)
set(body "")
set(table "")
set(i 0)
foreach(name IN LISTS FILES)
  set(path "${DIR}/${name}")
  file(READ "${path}" hex HEX)
  file(SHA256 "${path}" digest)
  string(SUBSTRING "${digest}" 0 16 etag)
  file(SIZE "${path}" size)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(APPEND body "const unsigned char a${i}[] = {${bytes}0x00};\n")
  string(APPEND table "      {\"${name}\", \"${etag}\", std::string_view(reinterpret_cast<const char*>(a${i}), ${size})},\n")
  math(EXPR i "${i} + 1")
endforeach()
file(WRITE "${OUT}.tmp"
"// Generated at build time by cmake/embed_assets.cmake from tools/server/webui/; not in the repository.
#include \"server/webui_assets.h\"

namespace phi4mm::server {
namespace {
${body}}  // namespace

const std::vector<WebAsset>& WebAssets() {
  static const std::vector<WebAsset> assets = {
${table}  };
  return assets;
}

}  // namespace phi4mm::server
")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT}.tmp" "${OUT}")
file(REMOVE "${OUT}.tmp")
