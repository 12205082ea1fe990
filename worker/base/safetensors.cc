#include "worker/base/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace trainyard {
namespace {

void WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("writing " + path + ": " + strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

int64_t TensorSpec::nbytes() const {
  int64_t n = static_cast<int64_t>(c10::elementSize(dtype));
  for (int64_t d : shape) n *= d;
  return n;
}

std::string SafetensorsDtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "F32";
    case at::kDouble: return "F64";
    case at::kHalf: return "F16";
    case at::kBFloat16: return "BF16";
    case at::kLong: return "I64";
    case at::kInt: return "I32";
    case at::kShort: return "I16";
    case at::kChar: return "I8";
    case at::kByte: return "U8";
    case at::kBool: return "BOOL";
    default: throw std::invalid_argument(std::string("safetensors: unsupported dtype ") + c10::toString(t));
  }
}

at::ScalarType FromSafetensorsDtype(const std::string& n) {
  for (at::ScalarType t : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kLong, at::kInt, at::kShort,
                           at::kChar, at::kByte, at::kBool}) {
    if (SafetensorsDtype(t) == n) return t;
  }
  throw std::invalid_argument("safetensors: unknown dtype '" + n + "'");
}

void WriteSafetensors(const std::string& path, const std::vector<TensorSpec>& tensors,
                      const std::function<at::Tensor(size_t)>& produce,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    header[t.name] = {
        {"dtype", SafetensorsDtype(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // pad so the data section is 8-byte aligned
  const uint64_t len = json.size();
  unsigned char len_le[8];
  for (int i = 0; i < 8; ++i) len_le[i] = static_cast<unsigned char>((len >> (8 * i)) & 0xff);

  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + path + ": " + strerror(errno));
  try {
    WriteAll(fd, len_le, 8, path);
    WriteAll(fd, json.data(), json.size(), path);
    for (size_t i = 0; i < tensors.size(); ++i) {
      at::Tensor t = produce(i);
      if (t.scalar_type() != tensors[i].dtype || t.sizes().vec() != tensors[i].shape) {
        throw std::invalid_argument("safetensors: tensor " + tensors[i].name +
                                    " does not match its declared dtype/shape");
      }
      t = t.contiguous().cpu();
      WriteAll(fd, t.data_ptr(), static_cast<size_t>(t.nbytes()), path);
    }
    if (::fsync(fd) != 0) throw std::runtime_error("fsync " + path + ": " + strerror(errno));
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) throw std::runtime_error("closing " + path + ": " + strerror(errno));
}

SafetensorsHeader ReadSafetensorsHeader(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error("cannot open " + path);
  const int64_t size = in.tellg();
  in.seekg(0);
  unsigned char len_le[8];
  if (size < 8 || !in.read(reinterpret_cast<char*>(len_le), 8))
    throw std::runtime_error(path + ": not a safetensors file");
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | len_le[i];
  if (len > 100u << 20 || static_cast<int64_t>(8 + len) > size) throw std::runtime_error(path + ": bad header length");
  std::string json(len, '\0');
  in.read(json.data(), static_cast<std::streamsize>(len));
  auto header = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) throw std::runtime_error(path + ": header is not a JSON object");
  SafetensorsHeader out;
  out.data_start = static_cast<int64_t>(8 + len);
  for (auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      for (auto& [k, v] : value.items()) out.metadata[k] = v.get<std::string>();
      continue;
    }
    SafetensorsEntry e;
    e.spec.name = key;
    e.spec.dtype = FromSafetensorsDtype(value.at("dtype").get<std::string>());
    e.spec.shape = value.at("shape").get<std::vector<int64_t>>();
    e.begin = value.at("data_offsets").at(0).get<int64_t>();
    e.end = value.at("data_offsets").at(1).get<int64_t>();
    if (e.end - e.begin != e.spec.nbytes() || out.data_start + e.end > size) {
      throw std::runtime_error(path + ": tensor " + key + " has inconsistent offsets");
    }
    out.tensors.push_back(e);
  }
  std::sort(out.tensors.begin(), out.tensors.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  return out;
}

at::Tensor ReadSafetensor(const std::string& path, const SafetensorsHeader& header, const std::string& name) {
  for (const SafetensorsEntry& e : header.tensors) {
    if (e.spec.name != name) continue;
    at::Tensor t = at::empty(e.spec.shape, at::TensorOptions(e.spec.dtype));
    std::ifstream in(path, std::ios::binary);
    in.seekg(header.data_start + e.begin);
    if (!in.read(static_cast<char*>(t.data_ptr()), e.end - e.begin))
      throw std::runtime_error(path + ": short read of " + name);
    return t;
  }
  throw std::out_of_range(path + ": no tensor named " + name);
}

at::Tensor ReadSafetensorRange(const std::string& path, const SafetensorsHeader& header, const std::string& name,
                               int64_t begin, int64_t end) {
  for (const SafetensorsEntry& e : header.tensors) {
    if (e.spec.name != name) continue;
    const int64_t numel = e.spec.nbytes() / static_cast<int64_t>(c10::elementSize(e.spec.dtype));
    if (begin < 0 || end < begin || end > numel) {
      throw std::out_of_range(path + ": range [" + std::to_string(begin) + ", " + std::to_string(end) + ") of " + name +
                              " outside its " + std::to_string(numel) + " elements");
    }
    at::Tensor t = at::empty({end - begin}, at::TensorOptions(e.spec.dtype));
    const int64_t item = static_cast<int64_t>(c10::elementSize(e.spec.dtype));
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("cannot open " + path + ": " + strerror(errno));
    char* out = static_cast<char*>(t.data_ptr());
    int64_t want = (end - begin) * item;
    off_t at = static_cast<off_t>(header.data_start + e.begin + begin * item);
    while (want > 0) {
      const ssize_t n = ::pread(fd, out, static_cast<size_t>(want), at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(fd);
        throw std::runtime_error(path + ": short read of " + name);
      }
      out += n;
      at += n;
      want -= n;
    }
    ::close(fd);
    return t;
  }
  throw std::out_of_range(path + ": no tensor named " + name);
}

std::vector<std::string> WriteShardedSafetensors(const std::string& dir, const std::vector<TensorSpec>& tensors,
                                                 const std::function<at::Tensor(size_t)>& produce,
                                                 int64_t max_shard_bytes) {
  std::vector<std::vector<size_t>> files;
  int64_t current = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int64_t n = tensors[i].nbytes();
    total += n;
    if (files.empty() || (current + n > max_shard_bytes && current > 0)) {
      files.emplace_back();
      current = 0;
    }
    files.back().push_back(i);
    current += n;
  }
  if (files.empty()) files.emplace_back();
  std::vector<std::string> names;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t f = 0; f < files.size(); ++f) {
    char name[64];
    if (files.size() == 1) {
      std::snprintf(name, sizeof(name), "model.safetensors");
    } else {
      std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", f + 1, files.size());
    }
    std::vector<TensorSpec> specs;
    for (size_t i : files[f]) {
      specs.push_back(tensors[i]);
      weight_map[tensors[i].name] = name;
    }
    const std::vector<size_t> indices = files[f];
    WriteSafetensors(dir + "/" + name, specs, [&](size_t k) { return produce(indices[k]); }, {{"format", "pt"}});
    names.push_back(name);
  }
  if (files.size() > 1) {
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    const std::string path = dir + "/model.safetensors.index.json";
    std::ofstream(path) << index.dump(2) << "\n";
    names.push_back("model.safetensors.index.json");
  }
  return names;
}

}  // namespace trainyard
