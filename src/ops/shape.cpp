// Joining, splitting and reordering ops. Most are composites of views and cat/index_select, so
// their gradients come from those; cat and flip are primitives with their own kernels.
#include <algorithm>
#include <numeric>

#include "ops/common.h"

namespace foundry {

using ops::Args;
using ops::BackwardContext;
using ops::OpDef;
using ops::Sample;
using ops::Value;

namespace {

// PyTorch skips 1-D empty tensors in cat (legacy behaviour).
bool skipped_in_cat(const Tensor& t) { return t.dim() == 1 && t.size(0) == 0; }

Tensor flip_view(const Tensor& x, const std::vector<int64_t>& dims) {
  Shape strides(x.strides());
  int64_t offset = x.storage_offset();
  for (int64_t d : dims) {
    if (x.size(d) > 0) offset += (x.size(d) - 1) * x.stride(d);
    strides[size_t(d)] = -x.stride(d);
  }
  return make_tensor(x.storage(), x.sizes(), strides, offset, x.dtype());
}

std::vector<int64_t> wrap_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op) {
  std::vector<int64_t> out;
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, ndim, op);
    FOUNDRY_CHECK_AS(ValueError, std::find(out.begin(), out.end(), w) == out.end(), "{}: dim {} appears multiple times",
                     op, w);
    out.push_back(w);
  }
  return out;
}

// Index along a dim of size n for padding modes (reflect / replicate / circular).
Tensor pad_index(int64_t n, int64_t left, int64_t right, const std::string& mode) {
  std::vector<int64_t> idx;
  for (int64_t i = -left; i < n + right; ++i) {
    int64_t j;
    if (mode == "reflect") {
      int64_t period = 2 * (n - 1);
      j = period == 0 ? 0 : ((i % period) + period) % period;
      if (j >= n) j = period - j;
    } else if (mode == "replicate") {
      j = std::clamp<int64_t>(i, 0, n - 1);
    } else {
      j = ((i % n) + n) % n;
    }
    idx.push_back(j);
  }
  return tensor<int64_t>(idx);
}

std::vector<Sample> pad_samples(DType dt, Generator& g) {
  Tensor x3 = ops::sample_uniform({2, 3, 5}, dt, g), x4 = ops::sample_uniform({1, 2, 4, 5}, dt, g);
  std::vector<Sample> s = {
      {{x3, std::vector<int64_t>{1, 2}, "constant", Value()}},
      {{x4, std::vector<int64_t>{1, 0, 2, 1}, "constant", 0.5}},
      {{x3, std::vector<int64_t>{-1, 2}, "constant", Value()}, "negative pad crops"},
  };
  if (is_floating(dt)) {
    s.push_back({{x3, std::vector<int64_t>{2, 3}, "reflect", Value()}});
    s.push_back({{x4, std::vector<int64_t>{1, 2, 2, 1}, "reflect", Value()}});
    s.push_back({{x3, std::vector<int64_t>{2, 1}, "replicate", Value()}});
    s.push_back({{x4, std::vector<int64_t>{3, 1, 0, 2}, "replicate", Value()}});
    s.push_back({{x3, std::vector<int64_t>{2, 3}, "circular", Value()}});
    s.push_back({{x4, std::vector<int64_t>{1, 2, 2, 1}, "circular", Value()}});
  }
  return s;
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) { return ops::call1(FOUNDRY_OP("cat"), {tensors, dim}); }
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  return ops::call1(FOUNDRY_OP("stack"), {tensors, dim});
}
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim) { return ops::call(FOUNDRY_OP("split"), {x, size, dim}); }
std::vector<Tensor> split_with_sizes(const Tensor& x, IntList sizes, int64_t dim) {
  return ops::call(FOUNDRY_OP("split_with_sizes"), {x, sizes, dim});
}
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  return ops::call(FOUNDRY_OP("chunk"), {x, chunks, dim});
}
std::vector<Tensor> unbind(const Tensor& x, int64_t dim) { return ops::call(FOUNDRY_OP("unbind"), {x, dim}); }
Tensor flip(const Tensor& x, IntList dims) { return ops::call1(FOUNDRY_OP("flip"), {x, dims}); }
Tensor roll(const Tensor& x, IntList shifts, IntList dims) { return ops::call1(FOUNDRY_OP("roll"), {x, shifts, dims}); }
Tensor repeat(const Tensor& x, IntList repeats) { return ops::call1(FOUNDRY_OP("repeat"), {x, repeats}); }
Tensor repeat_interleave(const Tensor& x, int64_t repeats, OptInt dim) {
  return ops::call1(FOUNDRY_OP("repeat_interleave"), {x, repeats, dim});
}
Tensor tile(const Tensor& x, IntList dims) { return ops::call1(FOUNDRY_OP("tile"), {x, dims}); }
Tensor pad(const Tensor& x, IntList p, const std::string& mode, std::optional<double> value) {
  return ops::call1(FOUNDRY_OP("pad"), {x, p, mode, value});
}
std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, const std::string& indexing) {
  return ops::call(FOUNDRY_OP("meshgrid"), {tensors, indexing});
}

namespace ops {

void register_shape_ops(Registry& r) {
  r.add({.schema_text = "cat(Tensor[] tensors, int dim=0) -> Tensor",
         .family = "shape",
         .doc = "Concatenates along an existing dim (dtypes promote; 1-D empty tensors are skipped).",
         .prepare =
             [](Args& a) {
               auto& ts = a[0].tensor_list();
               FOUNDRY_CHECK_AS(ValueError, !ts.empty(), "cat(): expected a non-empty list of Tensors");
               ResultTypeState st;
               for (const Tensor& t : ts) st.add_tensor(t.dtype(), std::max<int64_t>(t.dim(), 1), false);
               DType dt = st.result();
               for (Tensor& t : ts)
                 if (t.dtype() != dt) t = t.to(dt);
             },
         .forward =
             [](const Args& a) {
               const auto& ts = a[0].tensor_list();
               const Tensor* ref = nullptr;
               for (const Tensor& t : ts)
                 if (!skipped_in_cat(t)) {
                   ref = &t;
                   break;
                 }
               if (!ref) return std::vector<Tensor>{empty({0}, ts[0].dtype())};
               FOUNDRY_CHECK_AS(ValueError, ref->dim() > 0, "cat(): zero-dimensional tensor cannot be concatenated");
               int64_t dim = wrap_dim(a[1].to_int(), ref->dim(), "cat");
               Shape out_shape(ref->sizes());
               int64_t total = 0;
               for (size_t i = 0; i < ts.size(); ++i) {
                 const Tensor& t = ts[i];
                 if (skipped_in_cat(t)) continue;
                 FOUNDRY_CHECK_AS(ValueError, t.dim() == ref->dim(),
                                  "cat(): tensors must have same number of dimensions: got {} and {}", ref->dim(), t.dim());
                 for (int64_t d = 0; d < t.dim(); ++d)
                   if (d != dim)
                     FOUNDRY_CHECK_AS(ValueError, t.size(d) == ref->size(d),
                                      "cat(): sizes of tensors must match except in dimension {}: expected size {} but "
                                      "got size {} for tensor number {} in the list",
                                      dim, ref->size(d), t.size(d), i);
                 total += t.size(dim);
               }
               out_shape[size_t(dim)] = total;
               Tensor out = empty(out_shape, ts[0].dtype());
               int64_t off = 0;
               for (const Tensor& t : ts) {
                 if (skipped_in_cat(t)) continue;
                 Tensor dst = out.narrow(dim, off, t.size(dim));
                 copy_into(dst, t);
                 off += t.size(dim);
               }
               return std::vector<Tensor>{out};
             },
         .backward =
             [](BackwardContext& c) {
               std::vector<Tensor> grads;
               const Tensor& g = c.grad();
               int64_t dim = wrap_dim(c.int_arg("dim"), g.dim());
               int64_t off = 0;
               for (int i = 0; i < int(c.num_inputs_of("tensors")); ++i) {
                 Shape s = c.input_sizes_of("tensors", i);
                 if (s.size() == 1 && s[0] == 0) {
                   grads.push_back(c.needs_grad("tensors", i) ? zeros(s, g.dtype()) : Tensor());
                   continue;
                 }
                 int64_t len = s[size_t(dim)];
                 grads.push_back(c.needs_grad("tensors", i) ? g.narrow(dim, off, len) : Tensor());
                 off += len;
               }
               return grads;
             },
         .dtypes = kAllTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{
                   {{std::vector<Tensor>{sample_uniform({2, 3}, dt, g), sample_uniform({4, 3}, dt, g)}, int64_t(0)}},
                   {{std::vector<Tensor>{sample_uniform({2, 3}, dt, g), sample_uniform({2, 1}, dt, g),
                                         sample_uniform({2, 2}, dt, g)},
                     int64_t(-1)}},
                   {{std::vector<Tensor>{sample_uniform({2, 3}, dt, g), sample_uniform({0}, dt, g)}, int64_t(1)},
                    "legacy empty"},
               };
             }});

  r.add({.schema_text = "stack(Tensor[] tensors, int dim=0) -> Tensor",
         .family = "shape",
         .doc = "Joins same-shape tensors along a new dim.",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               const auto& ts = a[0].tensor_list();
               FOUNDRY_CHECK_AS(ValueError, !ts.empty(), "stack expects a non-empty TensorList");
               int64_t dim = wrap_dim(a[1].to_int(), ts[0].dim() + 1, "stack");
               std::vector<Tensor> us;
               for (size_t i = 0; i < ts.size(); ++i) {
                 FOUNDRY_CHECK_AS(ValueError, Shape(ts[i].sizes()) == Shape(ts[0].sizes()),
                                  "stack expects each tensor to be equal size, but got {} at entry 0 and {} at entry {}",
                                  shape_str(ts[0].sizes()), shape_str(ts[i].sizes()), i);
                 us.push_back(ts[i].unsqueeze(dim));
               }
               return std::vector<Tensor>{cat(us, dim)};
             },
         .dtypes = kAllTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{
                   {{std::vector<Tensor>{sample_uniform({2, 3}, dt, g), sample_uniform({2, 3}, dt, g)}, int64_t(0)}},
                   {{std::vector<Tensor>{sample_uniform({3}, dt, g), sample_uniform({3}, dt, g),
                                         sample_uniform({3}, dt, g)},
                     int64_t(1)}},
                   {{std::vector<Tensor>{sample_uniform({}, dt, g), sample_uniform({}, dt, g)}, int64_t(0)}, "0-d"},
               };
             }});

  r.add({.schema_text = "split(Tensor input, int split_size, int dim=0) -> Tensor[]",
         .family = "shape",
         .doc = "Views of split_size along dim (the last may be smaller).",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               FOUNDRY_CHECK_AS(ValueError, x.dim() > 0, "split: expected at least a 1-dimensional tensor");
               int64_t dim = wrap_dim(a[2].to_int(), x.dim(), "split");
               int64_t size = a[1].to_int(), n = x.size(dim);
               FOUNDRY_CHECK_AS(ValueError, size > 0 || (size == 0 && n == 0), "split expects split_size be non-negative, but got {}", size);
               std::vector<int64_t> sizes;
               if (n == 0) sizes.push_back(0);
               for (int64_t off = 0; off < n; off += size) sizes.push_back(std::min(size, n - off));
               return split_with_sizes(x, sizes, dim);
             },
         .dtypes = kAllTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = sample_uniform({5, 4}, dt, g);
               return std::vector<Sample>{{{x, int64_t(2), int64_t(0)}}, {{x, int64_t(3), int64_t(1)}}};
             }});
  // A primitive view op so that its gradient is one cat (not a zero-filled slice_backward per
  // piece): attention's q/k/v split is on the training hot path.
  r.add({.schema_text = "split_with_sizes(Tensor input, int[] split_sizes, int dim=0) -> Tensor[]",
         .family = "shape",
         .doc = "Views with the given sizes along dim (they must sum to the dim's size).",
         .kind = OpDef::Kind::View,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               FOUNDRY_CHECK_AS(ValueError, x.dim() > 0, "split_with_sizes: expected at least a 1-dimensional tensor");
               int64_t dim = wrap_dim(a[2].to_int(), x.dim(), "split_with_sizes");
               auto sizes = a[1].int_list();
               int64_t total = 0;
               for (int64_t s : sizes) {
                 FOUNDRY_CHECK_AS(ValueError, s >= 0, "split_with_sizes expects split_sizes to be non-negative, got {}", s);
                 total += s;
               }
               FOUNDRY_CHECK_AS(ValueError, total == x.size(dim),
                                "split_with_sizes expects split_sizes to sum exactly to {} (input size along dim {}), "
                                "but got split_sizes={}",
                                x.size(dim), dim, shape_str(sizes));
               std::vector<Tensor> out;
               int64_t off = 0;
               for (int64_t s : sizes) {
                 Shape sz(x.sizes());
                 sz[size_t(dim)] = s;
                 out.push_back(make_tensor(x.storage(), sz, x.strides(), x.storage_offset() + off * x.stride(dim), x.dtype()));
                 off += s;
               }
               return out;
             },
         .backward =
             [](BackwardContext& c) {
               Shape in = c.input_sizes("input");
               int64_t dim = wrap_dim(c.int_arg("dim"), int64_t(in.size()));
               auto sizes = c.arg("split_sizes").int_list();
               std::vector<Tensor> parts;
               for (size_t k = 0; k < sizes.size(); ++k) {
                 const Tensor& g = c.grad(int(k));  // zeros when that piece was unused
                 parts.push_back(g);
               }
               return std::vector<Tensor>{cat(parts, dim)};
             },
         .dtypes = kAllTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = sample_uniform({5, 4}, dt, g);
               return std::vector<Sample>{{{x, std::vector<int64_t>{1, 4}, int64_t(0)}},
                                          {{x, std::vector<int64_t>{2, 0, 2}, int64_t(1)}}};
             },
         .ref = "lambda input, split_sizes, dim=0: torch.split(input, split_sizes, dim)"});
  r.add({.schema_text = "chunk(Tensor input, int chunks, int dim=0) -> Tensor[]",
         .family = "shape",
         .doc = "At most `chunks` views of size ceil(n / chunks) along dim.",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               int64_t chunks = a[1].to_int();
               FOUNDRY_CHECK_AS(ValueError, chunks > 0, "chunk expects `chunks` to be greater than 0, got: {}", chunks);
               int64_t dim = wrap_dim(a[2].to_int(), x.dim(), "chunk");
               int64_t size = (x.size(dim) + chunks - 1) / chunks;
               return split(x, std::max<int64_t>(size, x.size(dim) == 0 ? 0 : 1), dim);
             },
         .dtypes = kAllTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = sample_uniform({5, 4}, dt, g);
               return std::vector<Sample>{{{x, int64_t(2), int64_t(0)}}, {{x, int64_t(3), int64_t(1)}}};
             }});
  r.add({.schema_text = "unbind(Tensor input, int dim=0) -> Tensor[]",
         .family = "shape",
         .doc = "All slices along dim (the dim removed).",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               int64_t dim = wrap_dim(a[1].to_int(), x.dim(), "unbind");
               std::vector<Tensor> out;
               for (int64_t i = 0; i < x.size(dim); ++i) out.push_back(select(x, dim, i));
               return out;
             },
         .dtypes = kAllTypes,
         .samples = [](DType dt, Generator& g) {
           Tensor x = sample_uniform({3, 4}, dt, g);
           return std::vector<Sample>{{{x, int64_t(0)}}, {{x, int64_t(1)}}};
         }});

  r.add({.schema_text = "flip(Tensor input, int[] dims) -> Tensor",
         .family = "shape",
         .doc = "Reverses the order along dims (a copy, as PyTorch).",
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               auto dims = wrap_dims(a[1].int_list(), std::max<int64_t>(x.dim(), 1), "flip");
               if (x.dim() == 0) return std::vector<Tensor>{clone(x)};
               return std::vector<Tensor>{clone(flip_view(x, dims))};
             },
         .backward = [](BackwardContext& c) { return std::vector<Tensor>{flip(c.grad(), c.arg("dims").int_list())}; },
         .dtypes = kAllTypes,
         .samples = [](DType dt, Generator& g) {
           Tensor x = sample_uniform({2, 3, 4}, dt, g);
           return std::vector<Sample>{{{x, std::vector<int64_t>{0}}}, {{x, std::vector<int64_t>{-1, 1}}},
                                      {{x, std::vector<int64_t>{}}}};
         }});

  r.add({.schema_text = "roll(Tensor input, int[] shifts, int[] dims=[]) -> Tensor",
         .family = "shape",
         .doc = "Rotates elements along dims (over the flattened input when dims is empty).",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               Tensor x = a.tensor(0);
               auto shifts = a[1].int_list();
               auto dims = a[2].int_list();
               if (dims.empty()) {
                 FOUNDRY_CHECK_AS(ValueError, shifts.size() == 1, "roll: shifts must be a single value when dims is empty");
                 return std::vector<Tensor>{roll(x.reshape({-1}), shifts, {0}).reshape(x.sizes())};
               }
               FOUNDRY_CHECK_AS(ValueError, shifts.size() == dims.size(),
                                "roll: shifts and dimensions must align. shifts: {}, dims: {}", shifts.size(), dims.size());
               for (size_t i = 0; i < dims.size(); ++i) {
                 int64_t d = wrap_dim(dims[i], x.dim(), "roll");
                 int64_t n = x.size(d);
                 if (n == 0) continue;
                 int64_t s = ((shifts[i] % n) + n) % n;
                 if (s == 0) continue;
                 x = cat({narrow(x, d, n - s, s), narrow(x, d, 0, n - s)}, d);
               }
               return std::vector<Tensor>{x};
             },
         .dtypes = kAllTypes,
         .samples = [](DType dt, Generator& g) {
           Tensor x = sample_uniform({3, 4}, dt, g);
           return std::vector<Sample>{{{x, std::vector<int64_t>{1}, std::vector<int64_t>{0}}},
                                      {{x, std::vector<int64_t>{-5, 2}, std::vector<int64_t>{1, 0}}},
                                      {{x, std::vector<int64_t>{3}, std::vector<int64_t>{}}, "flattened"}};
         }});

  r.add({.schema_text = "repeat(Tensor input, int[] repeats) -> Tensor",
         .family = "shape",
         .doc = "Tiles the input (repeats may add leading dims), as Tensor.repeat.",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               Tensor x = a.tensor(0);
               auto reps = a[1].int_list();
               FOUNDRY_CHECK_AS(ValueError, int64_t(reps.size()) >= x.dim(),
                                "repeat: number of repeat dims can not be smaller than number of tensor dims");
               int64_t lead = int64_t(reps.size()) - x.dim();
               Shape padded;
               for (int64_t i = 0; i < lead; ++i) padded.push_back(1);
               for (int64_t s : x.sizes()) padded.push_back(s);
               x = x.reshape(padded);
               // [s0, s1] -> [r0, s0, r1, s1] by expanding interleaved unit dims, then merge.
               Shape inter, expanded, final_shape;
               for (size_t d = 0; d < reps.size(); ++d) {
                 FOUNDRY_CHECK_AS(ValueError, reps[d] >= 0, "repeat: repeats can not be negative");
                 inter.push_back(1);
                 inter.push_back(padded[d]);
                 expanded.push_back(reps[d]);
                 expanded.push_back(padded[d]);
                 final_shape.push_back(reps[d] * padded[d]);
               }
               return std::vector<Tensor>{x.reshape(inter).expand(expanded).reshape(final_shape)};
             },
         .dtypes = kAllTypes,
         .samples = [](DType dt, Generator& g) {
           Tensor x = sample_uniform({2, 3}, dt, g);
           return std::vector<Sample>{{{x, std::vector<int64_t>{2, 1}}}, {{x, std::vector<int64_t>{2, 1, 3}}},
                                      {{sample_uniform({3}, dt, g), std::vector<int64_t>{0, 2}}, "zero repeat"}};
         },
         .ref = "lambda input, repeats: input.repeat(repeats)"});

  r.add({.schema_text = "repeat_interleave(Tensor input, int repeats, int? dim=None) -> Tensor",
         .family = "shape",
         .doc = "Repeats each element `repeats` times along dim (flattened when None).",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               Tensor x = a.tensor(0);
               int64_t reps = a[1].to_int();
               FOUNDRY_CHECK_AS(ValueError, reps >= 0, "repeat_interleave: repeats can not be negative");
               int64_t dim;
               if (a[2].is_none()) {
                 x = x.reshape({-1});
                 dim = 0;
               } else {
                 dim = wrap_dim(a[2].to_int(), x.dim(), "repeat_interleave");
               }
               Shape e(x.sizes());
               e.insert(size_t(dim) + 1, reps);
               Tensor u = x.unsqueeze(dim + 1).expand(e);
               Shape out(x.sizes());
               out[size_t(dim)] *= reps;
               return std::vector<Tensor>{u.reshape(out)};
             },
         .dtypes = kAllTypes,
         .samples = [](DType dt, Generator& g) {
           Tensor x = sample_uniform({2, 3}, dt, g);
           return std::vector<Sample>{{{x, int64_t(2), int64_t(1)}}, {{x, int64_t(3), Value()}}, {{x, int64_t(2), int64_t(0)}}};
         }});

  r.add({.schema_text = "tile(Tensor input, int[] dims) -> Tensor",
         .family = "shape",
         .doc = "numpy.tile: repeat with dims padded by leading ones.",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               auto reps = a[1].int_list();
               while (int64_t(reps.size()) < x.dim()) reps.insert(reps.begin(), 1);
               return std::vector<Tensor>{repeat(x, reps)};
             },
         .dtypes = kAllTypes,
         .samples = [](DType dt, Generator& g) {
           Tensor x = sample_uniform({2, 3}, dt, g);
           return std::vector<Sample>{{{x, std::vector<int64_t>{2}}}, {{x, std::vector<int64_t>{2, 1, 2}}}};
         }});

  r.add({.schema_text = "pad(Tensor input, int[] pad, str mode='constant', float? value=None) -> Tensor",
         .family = "shape",
         .doc = "Pads trailing dims by (left, right) pairs, last dim first; modes constant, reflect, replicate, "
                "circular; negative constant pads crop.",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               Tensor x = a.tensor(0);
               auto p = a[1].int_list();
               std::string mode = a[2].str();
               FOUNDRY_CHECK_AS(ValueError, p.size() % 2 == 0, "pad: padding length must be divisible by 2");
               FOUNDRY_CHECK_AS(ValueError, int64_t(p.size() / 2) <= x.dim(),
                                "pad: padding length {} too large for a {}-dim input", p.size(), x.dim());
               FOUNDRY_CHECK_AS(ValueError, mode == "constant" || mode == "reflect" || mode == "replicate" || mode == "circular",
                                "pad: unrecognised padding mode '{}'", mode);
               if (mode != "constant")
                 FOUNDRY_CHECK_AS(ValueError, a[3].is_none() || a[3].to_double() == 0,
                                  "pad: padding mode '{}' doesn't take in value argument", mode);
               for (size_t k = 0; k < p.size() / 2; ++k) {
                 int64_t d = x.dim() - 1 - int64_t(k);
                 int64_t left = p[2 * k], right = p[2 * k + 1];
                 int64_t n = x.size(d);
                 if (mode == "constant") {
                   double v = a[3].is_none() ? 0.0 : a[3].to_double();
                   if (left < 0) {
                     x = narrow(x, d, -left, n + left);
                     n += left;
                     left = 0;
                   }
                   if (right < 0) {
                     x = narrow(x, d, 0, n + right);
                     n += right;
                     right = 0;
                   }
                   std::vector<Tensor> parts;
                   Shape s(x.sizes());
                   if (left > 0) {
                     s[size_t(d)] = left;
                     parts.push_back(full(s, v, x.dtype()));
                   }
                   parts.push_back(x);
                   if (right > 0) {
                     s[size_t(d)] = right;
                     parts.push_back(full(s, v, x.dtype()));
                   }
                   if (parts.size() > 1) x = cat(parts, d);
                 } else {
                   FOUNDRY_CHECK_AS(ValueError, left >= 0 && right >= 0, "pad: {} padding must be non-negative", mode);
                   if (mode == "reflect")
                     FOUNDRY_CHECK_AS(ValueError, left < n && right < n,
                                      "pad: padding size should be less than the corresponding input dimension, but got: "
                                      "padding ({}, {}) at dimension {} of input {}",
                                      left, right, d, shape_str(x.sizes()));
                   if (mode == "circular")
                     FOUNDRY_CHECK_AS(ValueError, left <= n && right <= n,
                                      "pad: padding value causes wrapping around more than once");
                   FOUNDRY_CHECK_AS(ValueError, n > 0, "pad: {} padding of an empty dimension", mode);
                   x = index_select(x, d, pad_index(n, left, right, mode));
                 }
               }
               return std::vector<Tensor>{x};
             },
         .dtypes = kNumericTypes,
         .samples = pad_samples,
         .ref = "torch.nn.functional.pad"});

  r.add({.schema_text = "meshgrid(Tensor[] tensors, *, str indexing='ij') -> Tensor[]",
         .family = "shape",
         .doc = "Coordinate grids from 1-D tensors ('ij' or 'xy' indexing).",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               const auto& ts = a[0].tensor_list();
               const std::string& ix = a[1].str();
               FOUNDRY_CHECK_AS(ValueError, ix == "ij" || ix == "xy",
                                "meshgrid: indexing must be one of \"xy\" or \"ij\", but received: {}", ix);
               size_t n = ts.size();
               Shape shape;
               for (const Tensor& t : ts) {
                 FOUNDRY_CHECK_AS(ValueError, t.dim() <= 1, "meshgrid expects all tensors to have 0 or 1 dimensions");
                 shape.push_back(t.numel());
               }
               bool swap = ix == "xy" && n >= 2;
               if (swap) std::swap(shape[0], shape[1]);
               std::vector<Tensor> out;
               for (size_t i = 0; i < n; ++i) {
                 size_t pos = i;
                 if (swap && i < 2) pos = 1 - i;
                 Shape v(n, 1);
                 v[pos] = ts[i].numel();
                 out.push_back(ts[i].reshape(v).expand(shape));
               }
               return out;
             },
         .dtypes = kAllTypes,
         .samples = [](DType dt, Generator& g) {
           std::vector<Tensor> ts = {sample_uniform({3}, dt, g), sample_uniform({4}, dt, g)};
           return std::vector<Sample>{{{ts, "ij"}}, {{ts, "xy"}},
                                      {{std::vector<Tensor>{sample_uniform({2}, dt, g), sample_uniform({3}, dt, g),
                                                            sample_uniform({2}, dt, g)},
                                        "xy"}}};
         }});
}

}  // namespace ops
}  // namespace foundry
