// tensor/serialize.cpp — safetensors encoding/decoding and the atomic file write.
#include "tensor/serialize.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace minidl {

namespace {
constexpr uint64_t kMaxHeader = 100ull << 20;  // 100 MiB, as the reference implementation

const char* st_dtype(DType t) {
  switch (t) {
    case DType::Float32: return "F32";
    case DType::Float64: return "F64";
    case DType::Int64: return "I64";
    case DType::UInt8: return "U8";
  }
  return "?";
}

bool parse_st_dtype(const std::string& s, DType& out) {
  if (s == "F32") out = DType::Float32;
  else if (s == "F64") out = DType::Float64;
  else if (s == "I64") out = DType::Int64;
  else if (s == "U8") out = DType::UInt8;
  else return false;
  return true;
}

[[noreturn]] void fail(const std::string& what, const std::string& why) {
  throw std::runtime_error("safetensors: " + what + ": " + why);
}
}  // namespace

std::string serialize(const TensorMap& tensors, const Metadata& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") throw std::invalid_argument("safetensors: '__metadata__' is reserved as a tensor name");
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * element_size(t.dtype());
    header[name] = {{"dtype", st_dtype(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');  // align the data section to 8 bytes
  std::string out(8, '\0');
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += h;
  out.reserve(out.size() + offset);
  for (const auto& [name, t] : tensors) {
    Tensor c = t.cpu().contiguous();
    out.append(static_cast<const char*>(c.numel() ? c.raw_data() : nullptr),
               static_cast<size_t>(c.numel()) * element_size(c.dtype()));
  }
  return out;
}

SafetensorsFile deserialize(const std::string& bytes, const std::string& what) {
  if (bytes.size() < 8) fail(what, "truncated: " + std::to_string(bytes.size()) + " bytes, no header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (n > kMaxHeader) fail(what, "header length " + std::to_string(n) + " exceeds the 100 MiB limit (corrupt file?)");
  if (8 + n > bytes.size())
    fail(what, "truncated: header length " + std::to_string(n) + " but the file has " + std::to_string(bytes.size()) + " bytes");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  } catch (const std::exception& e) {
    fail(what, std::string("corrupt JSON header: ") + e.what());
  }
  if (!header.is_object()) fail(what, "header is not a JSON object");
  const uint64_t data_size = bytes.size() - 8 - n;
  const char* data = bytes.data() + 8 + n;
  SafetensorsFile out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) fail(what, "__metadata__ must be a string map");
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string()) fail(what, "__metadata__ value for '" + m.key() + "' is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    try {
      DType dt;
      if (!parse_st_dtype(e.at("dtype").get<std::string>(), dt))
        fail(what, "tensor '" + name + "' has unsupported dtype " + e.at("dtype").dump());
      const Shape shape = e.at("shape").get<Shape>();
      for (int64_t d : shape)
        if (d < 0) fail(what, "tensor '" + name + "' has a negative dimension");
      const auto offs = e.at("data_offsets").get<std::vector<uint64_t>>();
      if (offs.size() != 2 || offs[0] > offs[1] || offs[1] > data_size)
        fail(what, "tensor '" + name + "' has data_offsets " + e.at("data_offsets").dump() +
                       " outside the data section of " + std::to_string(data_size) + " bytes");
      const uint64_t expect = static_cast<uint64_t>(shape_numel(shape)) * element_size(dt);
      if (offs[1] - offs[0] != expect)
        fail(what, "tensor '" + name + "' of shape " + shape_str(shape) + " needs " + std::to_string(expect) +
                       " bytes, its offsets give " + std::to_string(offs[1] - offs[0]));
      Tensor t(shape, dt);
      if (expect) std::memcpy(t.raw_data(), data + offs[0], expect);
      out.tensors.emplace(name, std::move(t));
    } catch (const nlohmann::json::exception& ex) {
      fail(what, "tensor '" + name + "' has a malformed entry: " + ex.what());
    }
  }
  return out;
}

void save(const TensorMap& tensors, const std::string& path, const Metadata& metadata) {
  const std::string bytes = serialize(tensors, metadata);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("save: cannot create " + tmp + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0) {
      const std::string err = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      throw std::runtime_error("save: writing " + tmp + " failed: " + err);
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error("save: flushing " + tmp + " failed: " + std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw std::runtime_error("save: renaming " + tmp + " to " + path + " failed: " + err);
  }
}

SafetensorsFile load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("load: cannot open " + path + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  return deserialize(ss.str(), path);
}

}  // namespace minidl
