// tensor/serialize.cpp — safetensors encoding/decoding and the atomic file write.
#include "minidl/tensor/serialize.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace minidl {

namespace {
constexpr uint64_t kMaxHeader = 100ull << 20;  // 100 MiB, as the reference implementation

const char* st_dtype(DType t) {
  switch (t) {
    case DType::Float32:
      return "F32";
    case DType::Float64:
      return "F64";
    case DType::Int64:
      return "I64";
    case DType::UInt8:
      return "U8";
    case DType::BFloat16:
      return "BF16";
    case DType::Float16:
      return "F16";
  }
  return "?";
}

bool parse_st_dtype(const std::string& s, DType& out) {
  if (s == "F32")
    out = DType::Float32;
  else if (s == "F64")
    out = DType::Float64;
  else if (s == "I64")
    out = DType::Int64;
  else if (s == "U8")
    out = DType::UInt8;
  else if (s == "BF16")
    out = DType::BFloat16;
  else if (s == "F16")
    out = DType::Float16;
  else
    return false;
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

namespace {

// One tensor of a parsed header: where its bytes lie in the data section.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

struct Header {
  std::vector<Entry> entries;  // in data order
  Metadata metadata;
};

uint64_t read_u64_le(const char* p) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return n;
}

// Validates the header length against the total size (8 + header + data) before anything is read.
void check_header_length(uint64_t n, uint64_t total, const std::string& what) {
  if (n > kMaxHeader) fail(what, "header length " + std::to_string(n) + " exceeds the 100 MiB limit (corrupt file?)");
  if (8 + n > total)
    fail(what,
         "truncated: header length " + std::to_string(n) + " but the file has " + std::to_string(total) + " bytes");
}

// The array at e[key] as integers from 0 to 2^63 - 1. nlohmann's get<> would convert a number
// written as a float (2.5, or 1e90 for an integer too long for 64 bits) by a C++ cast, which is
// undefined out of range: each element must be an integer as written.
std::vector<uint64_t> index_array(const nlohmann::json& e, const char* key, const std::string& name,
                                  const std::string& what) {
  const nlohmann::json& a = e.at(key);
  if (!a.is_array()) fail(what, "tensor '" + name + "' has " + key + " " + a.dump() + ", not an array");
  std::vector<uint64_t> out;
  for (const nlohmann::json& v : a) {
    if (v.is_number_integer() && !v.is_number_unsigned())
      fail(what, "tensor '" + name + "' has a negative value in its " + key + " " + a.dump());
    if (!v.is_number_unsigned() || v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail(what,
           "tensor '" + name + "' has " + key + " " + a.dump() + ": each value must be an integer from 0 to 2^63 - 1");
    out.push_back(v.get<uint64_t>());
  }
  return out;
}

// Parses and validates the JSON header against a data section of data_size bytes: every tensor's
// byte range matches its shape and dtype, and the ranges tile the data section exactly, as the
// reference implementation requires (a gap, an overlap or trailing bytes is an error).
Header parse_header(const char* json, uint64_t n, uint64_t data_size, const std::string& what) {
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(json, json + n);
  } catch (const std::exception& e) {
    fail(what, std::string("corrupt JSON header: ") + e.what());
  }
  if (!header.is_object()) fail(what, "header is not a JSON object");
  Header out;
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
      Entry entry{.name = name, .dtype = DType::Float32, .shape = {}, .begin = 0, .end = 0};
      if (!parse_st_dtype(e.at("dtype").get<std::string>(), entry.dtype))
        fail(what, "tensor '" + name + "' has unsupported dtype " + e.at("dtype").dump());
      for (uint64_t d : index_array(e, "shape", name, what)) entry.shape.push_back(static_cast<int64_t>(d));
      uint64_t numel = 1;
      for (int64_t d : entry.shape) {
        // bounded by the data size before multiplying further: no overflow
        if (d != 0 && numel > data_size / static_cast<uint64_t>(d))
          fail(what, "tensor '" + name + "' of shape " + shape_str(entry.shape) +
                         " is larger than the data section of " + std::to_string(data_size) + " bytes");
        numel *= static_cast<uint64_t>(d);
      }
      const std::vector<uint64_t> offs = index_array(e, "data_offsets", name, what);
      if (offs.size() != 2 || offs[0] > offs[1] || offs[1] > data_size)
        fail(what, "tensor '" + name + "' has data_offsets " + e.at("data_offsets").dump() +
                       " outside the data section of " + std::to_string(data_size) + " bytes");
      const uint64_t expect = numel * element_size(entry.dtype);
      if (offs[1] - offs[0] != expect)
        fail(what, "tensor '" + name + "' of shape " + shape_str(entry.shape) + " needs " + std::to_string(expect) +
                       " bytes, its offsets give " + std::to_string(offs[1] - offs[0]));
      entry.begin = offs[0];
      entry.end = offs[1];
      out.entries.push_back(std::move(entry));
    } catch (const nlohmann::json::exception& ex) {
      fail(what, "tensor '" + name + "' has a malformed entry: " + ex.what());
    }
  }
  std::stable_sort(out.entries.begin(), out.entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  for (const Entry& e : out.entries) {
    if (e.begin != at)
      fail(what, "tensor '" + e.name + "' starts at byte " + std::to_string(e.begin) +
                     " of the data section, expected " + std::to_string(at) +
                     (e.begin < at ? " (it overlaps the previous tensor)" : " (a gap before it)"));
    at = e.end;
  }
  if (at != data_size)
    fail(what, std::to_string(data_size - at) + " unexpected bytes after the last tensor (the tensors end at byte " +
                   std::to_string(at) + " of a " + std::to_string(data_size) + "-byte data section; corrupt file?)");
  return out;
}

}  // namespace

SafetensorsFile deserialize(const std::string& bytes, const std::string& what) {
  if (bytes.size() < 8) fail(what, "truncated: " + std::to_string(bytes.size()) + " bytes, no header length");
  const uint64_t n = read_u64_le(bytes.data());
  check_header_length(n, bytes.size(), what);
  Header header = parse_header(bytes.data() + 8, n, bytes.size() - 8 - n, what);
  const char* data = bytes.data() + 8 + n;
  SafetensorsFile out;
  out.metadata = std::move(header.metadata);
  for (Entry& e : header.entries) {
    Tensor t(e.shape, e.dtype);
    if (e.end > e.begin) std::memcpy(t.raw_data(), data + e.begin, e.end - e.begin);
    out.tensors.emplace(std::move(e.name), std::move(t));
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

namespace {

// Reads exactly size bytes at offset, or fails naming the file.
void pread_all(int fd, char* dst, uint64_t size, uint64_t offset, const std::string& path) {
  while (size > 0) {
    const ssize_t r = ::pread(fd, dst, std::min<uint64_t>(size, uint64_t{1} << 30), static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw std::runtime_error("load: reading " + path + " failed: " + std::strerror(errno));
    if (r == 0) fail(path, "truncated while reading (the file shrank?)");
    dst += r;
    size -= static_cast<uint64_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

}  // namespace

// Header first, sizes checked against the file's size, then only the tensors' bytes: a huge or
// endless file (/dev/zero, a checkpoint padded with garbage) is refused before it is read.
SafetensorsFile load(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("load: cannot open " + path + ": " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw std::runtime_error("load: cannot stat " + path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) fail(path, "truncated: " + std::to_string(size) + " bytes, no header length");
  char prefix[8];
  pread_all(fd, prefix, 8, 0, path);
  const uint64_t n = read_u64_le(prefix);
  check_header_length(n, size, path);
  std::string json(n, '\0');
  pread_all(fd, json.data(), n, 8, path);
  Header header = parse_header(json.data(), n, size - 8 - n, path);
  SafetensorsFile out;
  out.metadata = std::move(header.metadata);
  for (Entry& e : header.entries) {
    Tensor t(e.shape, e.dtype);
    if (e.end > e.begin) pread_all(fd, static_cast<char*>(t.raw_data()), e.end - e.begin, 8 + n + e.begin, path);
    out.tensors.emplace(std::move(e.name), std::move(t));
  }
  return out;
}

}  // namespace minidl
