// tensor/serialize.h — tensors to and from files in the safetensors format, which PyTorch's and
// Hugging Face's safetensors readers open:
//   8 bytes   little-endian u64 N = header length
//   N bytes   JSON: {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//                    "__metadata__": {"key": "value", ...}}
//   rest      raw little-endian tensor bytes; offsets are relative to the end of the header
// save() writes a temporary file, fsyncs it and renames it over the target, so a crash mid-save
// leaves the previous file intact. load() validates everything and names the file and the fault;
// it reads the header first and checks every size against the file's size before reading the
// tensors, so memory stays bounded by what the header announces and the file holds. The tensors
// must tile the data section exactly (as the reference reader requires): trailing bytes, gaps and
// overlaps are errors. load() takes regular files only (not /dev/zero, pipes or directories).
#pragma once
#include <map>
#include <string>

#include "minidl/tensor/tensor.h"

namespace minidl {

using TensorMap = std::map<std::string, Tensor>;  // sorted by name, like a state_dict
using Metadata = std::map<std::string, std::string>;

struct SafetensorsFile {
  TensorMap tensors;
  Metadata metadata;
};

void save(const TensorMap& tensors, const std::string& path, const Metadata& metadata = {});
SafetensorsFile load(const std::string& path);
// In-memory forms (used by the file functions; also handy for sending state over a socket)
std::string serialize(const TensorMap& tensors, const Metadata& metadata = {});
SafetensorsFile deserialize(const std::string& bytes, const std::string& what = "buffer");

}  // namespace minidl
