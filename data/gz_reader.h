// data/gz_reader.h — reads a file that may or may not be gzip-compressed: zlib's gzread inflates
// .gz files and passes plain files through unchanged. Every error names the file. Used by the
// MNIST idx and CIFAR-10 readers; zlib stays an implementation detail of the library.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace minidl::data {

class GzReader {
 public:
  // Throws std::runtime_error "<path>: cannot open: <reason>".
  explicit GzReader(const std::string& path);
  ~GzReader();
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes into dst; returns how many were read (fewer than n only at the end of the
  // data, see ended_early()). A corrupt gzip stream (bad block, CRC mismatch) throws
  // std::runtime_error "<path>: corrupt gzip data: <zlib message>".
  int64_t read(void* dst, int64_t n);
  // Reads everything that is left.
  std::vector<uint8_t> read_all();
  // True when a gzip stream stopped before its end marker (a truncated .gz file).
  bool ended_early() const { return ended_early_; }
  // " (the gzip stream ends early)" when ended_early(), else "": appended to "truncated" messages.
  std::string early_end_note() const;
  const std::string& path() const { return path_; }
  // Whether the file is gzip data (false: a plain file passed through). Call after a read.
  bool compressed() const;

 private:
  std::string path_;
  void* file_ = nullptr;  // gzFile; void* keeps zlib.h out of this header
  bool ended_early_ = false;
};

}  // namespace minidl::data
