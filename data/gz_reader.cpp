// data/gz_reader.cpp — GzReader on zlib's gzopen / gzread / gzerror.
#include "minidl/data/gz_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace minidl::data {

GzReader::GzReader(const std::string& path) : path_(path) {
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr)
    throw std::runtime_error(path + ": cannot open: " + (errno != 0 ? std::strerror(errno) : "out of memory"));
  gzbuffer(f, 1 << 17);
  file_ = f;
}

GzReader::~GzReader() {
  if (file_ != nullptr) gzclose_r(static_cast<gzFile>(file_));
}

int64_t GzReader::read(void* dst, int64_t n) {
  gzFile f = static_cast<gzFile>(file_);
  auto* out = static_cast<unsigned char*>(dst);
  int64_t got = 0;
  while (got < n && !ended_early_) {
    const int64_t want = std::min<int64_t>(n - got, int64_t{1} << 30);  // gzread takes an unsigned int
    const int r = gzread(f, out + got, static_cast<unsigned>(want));
    if (r > 0) {
      got += r;
      continue;
    }
    int err = Z_OK;
    const char* msg = gzerror(f, &err);
    if (err == Z_BUF_ERROR) {  // "unexpected end of file": the gzip stream was cut short
      ended_early_ = true;
      break;
    }
    if (r < 0 || (err != Z_OK && err != Z_STREAM_END)) {
      std::string what = msg != nullptr ? msg : "unknown zlib error";
      if (what.rfind(path_ + ": ", 0) == 0) what.erase(0, path_.size() + 2);  // zlib prefixes the path
      throw std::runtime_error(path_ + ": corrupt gzip data: " + what);
    }
    break;  // r == 0: end of data
  }
  return got;
}

std::vector<uint8_t> GzReader::read_all() {
  std::vector<uint8_t> out;
  constexpr int64_t kChunk = 1 << 20;
  while (true) {
    const size_t old = out.size();
    out.resize(old + kChunk);
    const int64_t r = read(out.data() + old, kChunk);
    out.resize(old + static_cast<size_t>(r));
    if (r < kChunk) break;
  }
  return out;
}

bool GzReader::compressed() const { return gzdirect(static_cast<gzFile>(file_)) == 0; }

std::string GzReader::early_end_note() const { return ended_early_ ? " (the gzip stream ends early)" : ""; }

}  // namespace minidl::data
