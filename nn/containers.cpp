// nn/containers.cpp — ModuleList and ModuleDict (see containers.h).
#include "minidl/nn/containers.h"

#include <stdexcept>

namespace minidl::nn {

Module& ModuleList::append(std::unique_ptr<Module> m) {
  if (!m) throw std::invalid_argument("ModuleList.append: got a null module");
  return register_owned_module(std::to_string(size()), std::move(m));
}

Module& ModuleList::operator[](size_t i) const {
  const auto children = named_children();
  if (i >= children.size())
    throw std::out_of_range("ModuleList: index " + std::to_string(i) + " is out of range for " +
                            std::to_string(children.size()) + " modules");
  return *children[i].second;
}

Module& ModuleDict::insert(const std::string& key, std::unique_ptr<Module> m) {
  if (!m) throw std::invalid_argument("ModuleDict.insert: got a null module for '" + key + "'");
  return register_owned_module(key, std::move(m));
}

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& [k, m] : named_children())
    if (k == key) return true;
  return false;
}

Module& ModuleDict::operator[](const std::string& key) const {
  for (const auto& [k, m] : named_children())
    if (k == key) return *m;
  std::string known;
  for (const auto& k : keys()) known += (known.empty() ? "" : ", ") + k;
  throw std::out_of_range("ModuleDict: no key '" + key + "' (keys: " + (known.empty() ? "none" : known) + ")");
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, m] : named_children()) out.push_back(k);
  return out;
}

}  // namespace minidl::nn
