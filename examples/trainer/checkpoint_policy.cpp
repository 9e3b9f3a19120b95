// examples/trainer/checkpoint_policy.cpp — which checkpoints `train` keeps, resumes from and
// cleans up in --out (see checkpoint_policy.h).
#include "examples/trainer/checkpoint_policy.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <tuple>
#include <vector>

#include "examples/trainer/checkpoint.h"
#include "examples/trainer/launch.h"

namespace trainer {

namespace {

// The number N of a checkpoint file named PREFIX<digits>.safetensors, e.g. ("checkpoint_step_0000042
// .safetensors", "checkpoint_step_") -> 42; nullopt for any other name.
std::optional<int64_t> checkpoint_number(const std::string& name, const std::string& prefix) {
  const std::string suffix = ".safetensors";
  if (!name.starts_with(prefix) || !name.ends_with(suffix)) return std::nullopt;
  const std::string number = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (number.empty() || number.size() > 15 || number.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::stoll(number);
}

// Mid-epoch checkpoints kept in --out: the newest few (a restart needs only the newest that
// loads); the epoch checkpoints and checkpoint_last are never removed here.
constexpr size_t kKeepStepCheckpoints = 3;

}  // namespace

// What a run that stops without saving leaves behind: "the last good checkpoint in DIR is kept",
// or "no checkpoint was saved in DIR yet" when there is none to keep.
std::string kept_checkpoint_note(const std::string& out_dir) {
  std::error_code ec;
  if (std::filesystem::exists(out_dir + "/checkpoint_last.safetensors", ec))
    return "the last good checkpoint in " + out_dir + " is kept";
  return "no checkpoint was saved in " + out_dir + " yet";
}

// Removes all but the newest kKeepStepCheckpoints checkpoint_step_* files of `dir` (rank 0, after
// each mid-epoch save), so that saving every few steps does not fill the disk.
void prune_step_checkpoints(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::pair<int64_t, fs::path>> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (auto n = checkpoint_number(entry.path().filename().string(), "checkpoint_step_"))
      steps.emplace_back(*n, entry.path());
  if (steps.size() <= kKeepStepCheckpoints) return;
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; i + kKeepStepCheckpoints < steps.size(); ++i) fs::remove(steps[i].second, ec);
}

// Removes the leftovers of killed saves from `dir`: *.safetensors.tmp.PID files whose PID is no
// longer running (a live PID may be a save in progress). Before training and before each restart.
void remove_interrupted_saves(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const auto tmp = name.find(".safetensors.tmp.");
    if (tmp == std::string::npos) continue;
    const std::string pid = name.substr(tmp + 17);
    const bool numeric = !pid.empty() && pid.size() < 10 && pid.find_first_not_of("0123456789") == std::string::npos;
    if (numeric && ::kill(std::stoi(pid), 0) != 0 && errno == ESRCH) {
      std::error_code rm;
      fs::remove(entry.path(), rm);
      if (!rm) std::cerr << "train: removed " << entry.path().string() << ", left by an interrupted save\n";
    }
  }
}

// --out before training: leftovers of a killed save go; a directory holding an earlier run
// (metrics.jsonl or checkpoints) is refused unless --resume continues it, --overwrite replaces
// it, or this is a restart of the same run.
void prepare_out_dir(const std::string& out_dir, bool restart, bool resume, bool overwrite) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw UsageError("cannot create the output directory " + out_dir + ": " + ec.message());
  remove_interrupted_saves(out_dir);
  std::vector<fs::path> checkpoints;
  for (const auto& entry : fs::directory_iterator(out_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("checkpoint_") && name.ends_with(".safetensors")) checkpoints.push_back(entry.path());
  }
  if (ec) throw UsageError("cannot list the output directory " + out_dir + ": " + ec.message());
  if (restart) return;  // the same run, continued
  const std::string metrics = out_dir + "/metrics.jsonl";
  const bool has_run = fs::exists(metrics, ec) || !checkpoints.empty();
  if (!has_run || resume) return;
  if (!overwrite)
    throw UsageError("--out " + out_dir + " already holds a run (" +
                     (checkpoints.empty() ? std::string("metrics.jsonl") : checkpoints.front().filename().string()) +
                     "): continue it with --resume " + out_dir +
                     "/checkpoint_last.safetensors, replace it with "
                     "--overwrite, or choose another --out");
  for (const auto& c : checkpoints) fs::remove(c, ec);
  for (const std::string& f : {metrics, out_dir + "/train.log"}) {
    if (fs::exists(f, ec)) std::ofstream(f, std::ios::trunc);  // emptied in place
  }
}

// The newest complete checkpoint in `out_dir` by training progress (epoch, then step, as each
// file's header records it): checkpoint_last, the epoch checkpoints and the mid-epoch
// checkpoint_step_* files all compete — a kill between a step checkpoint's save and
// checkpoint_last's leaves the step file ahead; on a tie checkpoint_last wins. Candidates are
// loaded newest first; one that cannot be read (or holds NaN) is skipped, with a note. Every save
// is atomic, so a file under one of these names is normally complete.
std::optional<std::string> newest_checkpoint(const std::string& out_dir) {
  namespace fs = std::filesystem;
  struct Candidate {
    CheckpointPosition position;
    bool last = false;  // checkpoint_last
    std::string path;
  };
  std::vector<Candidate> candidates;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(out_dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool last = name == "checkpoint_last.safetensors";
    if (!last && !checkpoint_number(name, "checkpoint_epoch_") && !checkpoint_number(name, "checkpoint_step_"))
      continue;
    try {
      candidates.push_back({read_checkpoint_position(entry.path().string()), last, entry.path().string()});
    } catch (const std::exception& e) {
      std::cerr << "train: not resuming from " << entry.path().string() << ": " << e.what() << "\n";
    }
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.position, a.last, a.path) > std::tie(b.position, b.last, b.path);
  });
  for (const auto& c : candidates) {
    try {
      const Checkpoint ck = load_checkpoint(c.path);
      require_finite(ck.model, "it");
      return c.path;
    } catch (const std::exception& e) {
      std::cerr << "train: not resuming from " << c.path << ": " << e.what() << "\n";
    }
  }
  return std::nullopt;
}

// --resume FILE must leave something to train, or be the end of the run's last epoch (which is
// only evaluated): a checkpoint past that point is refused, saying why (exit 2).
void check_resume_position(const std::string& path, int64_t epochs) {
  const CheckpointPosition at = read_checkpoint_position(path);
  if (at.epoch < epochs || (at.epoch == epochs && at.step == 0)) return;
  const std::string saved = at.step > 0
                                ? "after step " + std::to_string(at.step) + " of epoch " + std::to_string(at.epoch + 1)
                                : "after epoch " + std::to_string(at.epoch);
  throw UsageError("nothing left to train: " + path + " was saved " + saved + ", past the last epoch of this run (" +
                   std::to_string(epochs) + " epochs); give --epochs above " + std::to_string(at.epoch) +
                   " to train further, or evaluate it with --eval --pretrained " + path);
}

}  // namespace trainer
