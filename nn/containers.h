// nn/containers.h — ModuleList and ModuleDict: containers that own their children and register
// them under their index ("0", "1", ...) or key, so parameters, state_dict and printing see them;
// forward is the user's (iterate over the container), as in PyTorch.
//   nn::ModuleList blocks;
//   for (int i = 0; i < 4; ++i) blocks.push_back<nn::TransformerEncoderLayer>(opts);
//   for (nn::Module& b : blocks) x = b(x);
//   nn::ModuleDict heads;
//   heads.emplace<nn::Linear>("cls", nn::LinearOptions{.in = 64, .out = 10});
//   Variable y = heads["cls"](x);
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "minidl/nn/module.h"

namespace minidl::nn {

class ModuleList : public Module {
 public:
  std::string type_name() const override { return "ModuleList"; }

  template <class M, class... Args> M& push_back(Args&&... args) {
    return static_cast<M&>(append(std::make_unique<M>(std::forward<Args>(args)...)));
  }
  Module& append(std::unique_ptr<Module> m);
  size_t size() const { return named_children().size(); }
  bool empty() const { return size() == 0; }
  // Bounds-checked (throws std::out_of_range naming the index and the size).
  Module& operator[](size_t i) const;
  // The i-th child as its concrete type (throws std::invalid_argument if it is another type).
  template <class M> M& at(size_t i) const {
    auto* p = dynamic_cast<M*>(&(*this)[i]);
    if (!p) throw std::invalid_argument("ModuleList: child " + std::to_string(i) + " is a " + (*this)[i].type_name());
    return *p;
  }

  struct Iterator {  // by index, so a child replaced by convert_sync_batchnorm is seen as the new one
    const ModuleList* list;
    size_t i;
    Module& operator*() const { return (*list)[i]; }
    Iterator& operator++() {
      ++i;
      return *this;
    }
    bool operator!=(const Iterator& o) const { return i != o.i; }
  };
  Iterator begin() const { return {this, 0}; }
  Iterator end() const { return {this, size()}; }
};

class ModuleDict : public Module {
 public:
  std::string type_name() const override { return "ModuleDict"; }

  template <class M, class... Args> M& emplace(const std::string& key, Args&&... args) {
    return static_cast<M&>(insert(key, std::make_unique<M>(std::forward<Args>(args)...)));
  }
  // Keys must be new, non-empty and without '.' (an error names the key otherwise).
  Module& insert(const std::string& key, std::unique_ptr<Module> m);
  bool contains(const std::string& key) const;
  size_t size() const { return named_children().size(); }
  // Throws std::out_of_range naming the key and the keys there are.
  Module& operator[](const std::string& key) const;
  std::vector<std::string> keys() const;  // in insertion order
};

}  // namespace minidl::nn
