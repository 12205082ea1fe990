#include <nlohmann/json.hpp>

#include <cctype>
#include <map>
#include <stdexcept>
#include <string>

#include "common/spec/job_spec.h"
#include "common/spec/spec_tables.h"

namespace trainyard {

std::string JobSpecToJson(const JobSpec& s) {
  nlohmann::ordered_json j = spec::WriteSection(spec::JobSpecTable(), s);
  if (!s.script.empty()) {
    for (const char* key : kScriptRefusedTrainerFields) j.erase(key);
    for (const char* key : kScriptRefusedAccelerateFields) j.erase(key);
  }
  // Strings were checked to be UTF-8; replace rather than throw all the same.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

int64_t ParseSize(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0)
    throw std::invalid_argument("size '" + text + "': expected a number with an optional unit (e.g. 1GB, 500MB)");
  const double value = std::stod(text.substr(0, i));
  std::string unit = text.substr(i);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  unit.erase(0, unit.find_first_not_of(' '));
  const std::map<std::string, double> units = {
      {"", 1},      {"B", 1},      {"KB", 1e3},      {"MB", 1e6},      {"GB", 1e9},
      {"TB", 1e12}, {"KIB", 1024}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"TIB", 1099511627776.0}};
  auto it = units.find(unit);
  if (it == units.end()) throw std::invalid_argument("size '" + text + "': unknown unit '" + unit + "'");
  const double bytes = value * it->second;
  if (!(bytes >= 1) || bytes > 9.0e18)
    throw std::invalid_argument("size '" + text + "': must be between 1 byte and 9EB");
  return static_cast<int64_t>(bytes);
}

}  // namespace trainyard
