// tests/nn/test_state_dict_messages.cpp — load_state_dict's error on a forged state dict with
// 200,000 unexpected keys names the first few and counts the rest, instead of listing them all.
#include <string>

#include "minidl/nn/linear.h"
#include "tests/common/testing.h"

using namespace minidl;

TEST(StateDictMessages, TheUnexpectedKeyListIsCapped) {
  nn::Linear layer({.in = 2, .out = 2});
  TensorMap state = layer.state_dict();
  for (int i = 0; i < 200000; ++i) state["forged." + std::to_string(i)] = zeros({1});
  try {
    layer.load_state_dict(state);
    FAIL() << "load_state_dict accepted 200000 unexpected keys";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_LT(msg.size(), 1000u) << msg.substr(0, 300);
    EXPECT_NE(msg.find("Unexpected key(s) in state_dict: \"forged.0\", \"forged.1\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("and 199990 more (200000 in all)"), std::string::npos) << msg;
  }
}

TEST(StateDictMessages, AShortListIsGivenWhole) {
  nn::Linear layer({.in = 2, .out = 2});
  TensorMap state = layer.state_dict();
  state.erase("bias");
  EXPECT_THROW_MSG(layer.load_state_dict(state), std::invalid_argument, "Missing key(s) in state_dict: \"bias\".");
}
