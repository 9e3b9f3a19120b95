// dist/trace_file.cpp — every rank's trace events into one file on rank 0 (see trace_file.h).
#include "minidl/dist/trace_file.h"

#include "minidl/autograd/trace.h"
#include "minidl/dist/distributed.h"

namespace minidl::dist {

void write_trace(const std::string& path, ProcessGroup* group) {
  namespace trace = autograd::trace;
  trace::enable(false);  // the gather below is not part of the picture
  if (!group && is_initialized()) group = &default_group();
  const int rank = group ? group->rank() : 0;
  const std::string mine = trace::events_json(rank, "rank " + std::to_string(rank));
  trace::clear();
  if (!group || group->size() == 1) return trace::write_file(path, trace::document({mine}));
  const std::vector<std::string> all = group->all_gather_object(mine);
  if (rank == 0) trace::write_file(path, trace::document(all));
}

}  // namespace minidl::dist
