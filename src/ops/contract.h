// An op's contract: what its operands must be (shapes, strides, dtypes, one device, aliasing),
// stated once per op in its header as `<op>_contract(...)` and run by the dispatcher
// (ops/dispatch.h) before any backend, on every device and in meta mode alike, so that a meta
// plan rejects exactly the calls a real run would. It reads no tensor data (meta tensors have
// none): checks of values (index ranges) stay with the backend that reads them.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>

#include "core/error.h"
#include "core/tensor.h"

namespace mls::ops {

// The checks of one call, against the device of the op's output. Every failure is a ShapeError
// naming the op, the operand, what it must be and what it is (an InvalidArgument for a scalar
// argument out of its range).
class Contract {
 public:
  Contract(const char* op, const Tensor& out) : op_(op), device_(out.device()) {}

  bool gpu() const { return !device_.is_cpu(); }
  const char* op() const { return op_; }

  template <class... A>
  void need(bool ok, const char* name, const Tensor& t, fmt::format_string<A...> expected,
            A&&... a) const {
    if (!ok) fail(name, t, fmt::format(expected, std::forward<A>(a)...));
  }
  [[noreturn]] void fail(const char* name, const Tensor& t, const std::string& expected) const {
    raise<ShapeError>("{}: {} must be {}, found {} on {}", op_, name, expected, found(t),
                      t.defined() ? t.device().str() : std::string("-"));
  }

  // A scalar argument that must be positive.
  void positive(const char* name, double v) const {
    if (!(v > 0.0)) raise<InvalidArgument>("{}: {} must be positive, found {}", op_, name, v);
  }
  // On the output's device.
  void on_device(const char* name, const Tensor& t) const {
    need(t.device() == device_, name, t, "on {}", device_.str());
  }
  void dtype(const char* name, const Tensor& t, std::initializer_list<DType> allowed) const {
    if (std::find(allowed.begin(), allowed.end(), t.dtype()) != allowed.end()) return;
    std::string names;
    for (DType d : allowed) names += (names.empty() ? "" : " or ") + std::string(dtype_name(d));
    fail(name, t, names);
  }
  // An activation in a dtype the backend computes in: f32 on the CPU; on a GPU bf16, or also
  // f32 where the kernel reads both (`gpu_f32`).
  void activation(const char* name, const Tensor& t, bool gpu_f32 = true) const {
    if (!gpu())
      dtype(name, t, {DType::kF32});
    else if (gpu_f32)
      dtype(name, t, {DType::kBF16, DType::kF32});
    else
      dtype(name, t, {DType::kBF16});
  }
  // `ndim` dimensions with unit innermost stride (rows may be strided).
  void rows(const char* name, const Tensor& t, int ndim) const {
    need(t.ndim() == ndim && t.stride(-1) == 1, name, t, "{}-d with unit inner stride", ndim);
  }
  // Rows of `width` elements that do not overlap (row stride at least the width).
  void rows_apart(const char* name, const Tensor& t, int64_t width) const {
    need(t.dim(0) <= 1 || t.stride(0) >= width, name, t, "rows apart");
  }
  // An index list: contiguous i32 [n] on the output's device (any length for n < 0).
  void index(const char* name, const Tensor& t, int64_t n) const {
    dtype(name, t, {DType::kI32});
    on_device(name, t);
    need(t.is_contiguous() && (n < 0 || t.numel() == n), name, t, "contiguous with {} elements", n);
  }
  // Distinct memory: an op that reads `a` while writing `b` in another order cannot alias them.
  // Checked where both have memory (meta tensors have none) and sharing is certain: their spans
  // overlap and they start at one address, or both are contiguous (interleaved strided views of
  // one buffer, such as column slices, are apart).
  void disjoint(const char* name, const Tensor& a, const char* other, const Tensor& b) const {
    if (!a.raw() || !b.raw() || a.numel() == 0 || b.numel() == 0) return;
    const auto [a0, a1] = span(a);
    const auto [b0, b1] = span(b);
    const bool shared =
        a1 > b0 && b1 > a0 && (a0 == b0 || (a.is_contiguous() && b.is_contiguous()));
    need(!shared, name, a, "memory apart from {} {}", other, found(b));
  }

 private:
  static std::string found(const Tensor& t) { return t.defined() ? t.str() : "undefined"; }
  // The bytes [first, last) a strided tensor's elements lie in.
  static std::pair<const char*, const char*> span(const Tensor& t) {
    int64_t last = 0;
    for (int d = 0; d < t.ndim(); ++d) last += (t.dim(d) - 1) * t.stride(d);
    const auto* p = static_cast<const char*>(t.raw());
    return {p, p + (last + 1) * static_cast<int64_t>(dtype_size(t.dtype()))};
  }

  const char* op_;
  Device device_;
};

}  // namespace mls::ops
