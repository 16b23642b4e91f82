#include "backend.h"

#include "chorus/error.h"

namespace chorus::bench {
namespace {
constexpr Op kAllOps[] = {Op::kAllreduce, Op::kAllgather, Op::kBroadcast, Op::kReduceScatter,
                          Op::kAlltoall};
}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllreduce:
      return "allreduce";
    case Op::kAllgather:
      return "allgather";
    case Op::kBroadcast:
      return "broadcast";
    case Op::kReduceScatter:
      return "reduce_scatter";
    case Op::kAlltoall:
      return "alltoall";
  }
  return "?";
}

std::vector<Op> parse_ops(const std::string& name) {
  if (name == "all") return std::vector<Op>(std::begin(kAllOps), std::end(kAllOps));
  for (Op op : kAllOps) {
    if (name == op_name(op)) return {op};
  }
  CHORUS_THROW(InvalidArgument, "unknown --op '", name,
               "' (allreduce, allgather, broadcast, reduce_scatter, alltoall, all)");
}

}  // namespace chorus::bench
