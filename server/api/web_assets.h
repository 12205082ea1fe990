// The web UI's files, compiled into the server at build time (server/api/web/
// and Debian's Chart.js, by cmake/embed_files.cmake): the UI needs no
// network and no files beside the binary.
#ifndef TRAINYARD_SERVER_API_WEB_ASSETS_H_
#define TRAINYARD_SERVER_API_WEB_ASSETS_H_

#include <optional>
#include <string_view>

namespace trainyard {

struct WebAsset {
  std::string_view name;  // "app.js"
  std::string_view content_type;
  std::string_view body;
};

// The file called `name` (no directories), if the UI has one.
std::optional<WebAsset> FindWebAsset(std::string_view name);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_API_WEB_ASSETS_H_
