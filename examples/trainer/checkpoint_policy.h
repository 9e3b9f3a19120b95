// examples/trainer/checkpoint_policy.h — what `train` does with the checkpoints in --out: which
// one a restart resumes from (the newest that loads, by training progress), how many mid-epoch
// ones it keeps, the leftovers of killed saves, an --out that already holds a run, a --resume
// past the last epoch, and what a run that stops without saving leaves behind. The files
// themselves are checkpoint.h's.
// Part of the `train` example (examples/train.cpp); not a library module.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace trainer {

// "the last good checkpoint in DIR is kept", or "no checkpoint was saved in DIR yet" when there
// is none to keep (for the messages of a run that stops without saving).
std::string kept_checkpoint_note(const std::string& out_dir);

// Removes all but the newest few checkpoint_step_* files of `dir` (rank 0, after each mid-epoch
// save), so that saving every few steps does not fill the disk; the epoch checkpoints and
// checkpoint_last are never removed.
void prune_step_checkpoints(const std::string& dir);

// Removes the leftovers of killed saves from `dir` (*.safetensors.tmp.PID of a PID that no longer
// runs), saying so on stderr. Before training and before each restart.
void remove_interrupted_saves(const std::string& dir);

// --out before training: created; leftovers of killed saves removed; a directory holding an
// earlier run (metrics.jsonl or checkpoints) is a UsageError unless `resume` continues it,
// `overwrite` replaces it (its checkpoints removed, its log and metrics emptied) or `restart`
// (a restart of the same run).
void prepare_out_dir(const std::string& out_dir, bool restart, bool resume, bool overwrite);

// The newest complete checkpoint in `out_dir` by training progress (epoch, then step, as each
// file's header records it) among checkpoint_last, the epoch and the mid-epoch checkpoints (on a
// tie checkpoint_last wins); one that does not load (truncated, corrupt, holding NaN) is skipped
// with a note on stderr saying why. nullopt when none loads.
std::optional<std::string> newest_checkpoint(const std::string& out_dir);

// --resume FILE must leave something to train (a checkpoint before the end of the last of
// `epochs`), or be that end (then the run only evaluates it); later is a UsageError saying why.
void check_resume_position(const std::string& path, int64_t epochs);

}  // namespace trainer
