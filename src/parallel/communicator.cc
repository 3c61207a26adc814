#include "parallel/communicator.h"

#include "core/error.h"

namespace mls {
namespace {

void check_float(const char* op, const Tensor& x) {
  if (!dtype_is_float(x.dtype()) || !x.is_contiguous())
    raise<ShapeError>("{}: needs a contiguous float tensor, got {}", op, x.str());
}

}  // namespace

void Communicator::all_reduce(Tensor& x) {
  check_float("all_reduce", x);
  run_all_reduce(x);
}

void Communicator::all_gather(const Tensor& in, Tensor& out) {
  if (!in.is_contiguous() || !out.is_contiguous() || in.dtype() != out.dtype() ||
      out.numel() != in.numel() * size())
    raise<ShapeError>("all_gather: {} from each of {} ranks into {}", in.str(), size(), out.str());
  run_all_gather(in, out);
}

void Communicator::reduce_scatter(const Tensor& in, Tensor& out) {
  check_float("reduce_scatter", in);
  if (!out.is_contiguous() || in.dtype() != out.dtype() || in.numel() != out.numel() * size())
    raise<ShapeError>("reduce_scatter: {} over {} ranks into {}", in.str(), size(), out.str());
  run_reduce_scatter(in, out);
}

void Communicator::broadcast(Tensor& x, int root) {
  if (root < 0 || root >= size()) raise<InvalidArgument>("broadcast from rank {}", root);
  if (!x.is_contiguous()) raise<ShapeError>("broadcast of non-contiguous {}", x.str());
  run_broadcast(x, root);
}

}  // namespace mls
