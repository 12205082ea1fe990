#include "common/spec/spec_reference.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/spec/spec_tables.h"

namespace trainyard {

std::string SpecReferenceTable() {
  std::vector<std::vector<std::string>> rows;
  spec::ReferenceRows(spec::JobSpecTable(), "", &rows);
  std::string out = "| Field | Type | Default | Accepted values | Meaning |\n|---|---|---|---|---|\n";
  for (const std::vector<std::string>& r : rows) {
    const std::string def = r[2].empty() ? "" : absl::StrCat("`", absl::StrReplaceAll(r[2], {{"|", "\\|"}}), "`");
    absl::StrAppend(&out, "| `", r[0], "` | ", r[1], " | ", def, " | ", absl::StrReplaceAll(r[3], {{"|", "\\|"}}),
                    " | ", r[4], " |\n");
  }
  return out;
}

}  // namespace trainyard
