#include "verify.h"

#include <cstdint>
#include <sstream>

#include "chorus/error.h"

namespace chorus::bench {
namespace {

// Rank r's element i: a small integer, exact in every verifiable dtype.
inline int64_t value(int rank, size_t i) {
  return static_cast<int64_t>((i * 7 + rank * 3) % 17) + 1;
}

inline int64_t sum_over_ranks(size_t i, int ranks) {
  int64_t sum = 0;
  for (int r = 0; r < ranks; ++r) sum += value(r, i);
  return sum;
}

constexpr int64_t kPoison = -1;

template <typename T>
void fill_typed(Op op, T* send, T* recv, size_t count, int rank, int ranks) {
  size_t n_send = send_elements(op, count, ranks);
  size_t n_recv = recv_elements(op, count, ranks);
  for (size_t i = 0; i < n_send; ++i) send[i] = static_cast<T>(value(rank, i));
  for (size_t i = 0; i < n_recv; ++i) recv[i] = static_cast<T>(kPoison);
  if (op == Op::kAllreduce) {
    for (size_t i = 0; i < count; ++i) recv[i] = send[i];
  } else if (op == Op::kBroadcast && rank == 0) {
    for (size_t i = 0; i < count; ++i) recv[i] = static_cast<T>(value(0, i));
  }
}

// The value recv[i] must hold after `op` on `rank`.
int64_t expected(Op op, size_t i, size_t count, int rank, int ranks) {
  switch (op) {
    case Op::kAllreduce:
      return sum_over_ranks(i, ranks);
    case Op::kAllgather:
      return value(static_cast<int>(i / count), i % count);
    case Op::kBroadcast:
      return value(0, i);
    case Op::kReduceScatter:
      return sum_over_ranks(rank * count + i, ranks);
    case Op::kAlltoall:
      return value(static_cast<int>(i / count), rank * count + i % count);
  }
  return 0;
}

template <typename T>
std::string check_typed(Op op, const T* recv, size_t count, int rank, int ranks) {
  size_t n = recv_elements(op, count, ranks);
  for (size_t i = 0; i < n; ++i) {
    int64_t want = expected(op, i, count, rank, ranks);
    if (recv[i] != static_cast<T>(want)) {
      std::ostringstream out;
      out << "rank " << rank << " " << op_name(op) << " count " << count << ": element " << i
          << " is " << static_cast<double>(recv[i]) << ", expected " << want;
      return out.str();
    }
  }
  return "";
}

}  // namespace

bool verifiable(DataType type) {
  return type == DataType::kFloat32 || type == DataType::kFloat64 || type == DataType::kInt32 ||
         type == DataType::kInt64;
}

size_t send_elements(Op op, size_t count, int ranks) {
  switch (op) {
    case Op::kAllreduce:
    case Op::kAllgather:
      return count;
    case Op::kBroadcast:
      return 0;
    case Op::kReduceScatter:
    case Op::kAlltoall:
      return count * ranks;
  }
  return 0;
}

size_t recv_elements(Op op, size_t count, int ranks) {
  switch (op) {
    case Op::kAllreduce:
    case Op::kBroadcast:
    case Op::kReduceScatter:
      return count;
    case Op::kAllgather:
    case Op::kAlltoall:
      return count * ranks;
  }
  return 0;
}

void fill_inputs(Op op, void* send, void* recv, size_t count, DataType type, int rank, int ranks) {
  switch (type) {
    case DataType::kFloat32:
      return fill_typed(op, static_cast<float*>(send), static_cast<float*>(recv), count, rank,
                        ranks);
    case DataType::kFloat64:
      return fill_typed(op, static_cast<double*>(send), static_cast<double*>(recv), count, rank,
                        ranks);
    case DataType::kInt32:
      return fill_typed(op, static_cast<int32_t*>(send), static_cast<int32_t*>(recv), count, rank,
                        ranks);
    case DataType::kInt64:
      return fill_typed(op, static_cast<int64_t*>(send), static_cast<int64_t*>(recv), count, rank,
                        ranks);
    default:
      CHORUS_THROW(InvalidArgument, "chorus-bench cannot verify dtype ", dtype_name(type));
  }
}

std::string check_result(Op op, const void* recv, size_t count, DataType type, int rank,
                         int ranks) {
  switch (type) {
    case DataType::kFloat32:
      return check_typed(op, static_cast<const float*>(recv), count, rank, ranks);
    case DataType::kFloat64:
      return check_typed(op, static_cast<const double*>(recv), count, rank, ranks);
    case DataType::kInt32:
      return check_typed(op, static_cast<const int32_t*>(recv), count, rank, ranks);
    case DataType::kInt64:
      return check_typed(op, static_cast<const int64_t*>(recv), count, rank, ranks);
    default:
      CHORUS_THROW(InvalidArgument, "chorus-bench cannot verify dtype ", dtype_name(type));
  }
}

}  // namespace chorus::bench
