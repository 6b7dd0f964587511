#include "convert.h"

#include <algorithm>

#include "foundry/nn/module.h"
#include "foundry/ops/ops.h"

namespace foundry::python {

namespace {

struct NpMap {
  char kind;
  int size;
  DType dtype;
};
constexpr NpMap kNp[] = {
    {'b', 1, DType::Bool},   {'u', 1, DType::UInt8},   {'i', 1, DType::Int8},    {'i', 2, DType::Int16},
    {'i', 4, DType::Int32},  {'i', 8, DType::Int64},   {'f', 2, DType::Float16}, {'f', 4, DType::Float32},
    {'f', 8, DType::Float64}, {'u', 2, DType::UInt16},  {'u', 4, DType::UInt32},  {'u', 8, DType::UInt64},
};

DType dtype_of_array(const py::array& a) {
  char kind = a.dtype().kind();
  int size = int(a.itemsize());
  for (const NpMap& m : kNp)
    if (m.kind == kind && m.size == size) return m.dtype;
  throw py::type_error("numpy dtype " + std::string(py::str(a.dtype())) + " has no foundry equivalent");
}

const char* np_format(DType dt) {
  switch (dt) {
    case DType::Bool: return "?";
    case DType::UInt8: return "B";
    case DType::Int8: return "b";
    case DType::Int16: return "h";
    case DType::Int32: return "i";
    case DType::Int64: return "q";
    case DType::Float16: return "e";
    case DType::Float32: return "f";
    case DType::Float64: return "d";
    case DType::UInt16: return "H";
    case DType::UInt32: return "I";
    case DType::UInt64: return "Q";
    default: return nullptr;
  }
}

bool is_sequence(py::handle obj) { return py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj); }

}  // namespace

DType dtype_from(py::handle obj) {
  if (py::isinstance<DType>(obj)) return obj.cast<DType>();
  if (py::isinstance<py::str>(obj)) {
    std::string s = obj.cast<std::string>();
    if (s.rfind("torch.", 0) == 0) s = s.substr(6);
    return dtype_from_name(s);
  }
  if (py::hasattr(obj, "itemsize") && py::hasattr(obj, "kind")) {
    py::array probe = py::array(py::dtype::from_args(py::reinterpret_borrow<py::object>(obj)), std::vector<py::ssize_t>{0});
    return dtype_of_array(probe);
  }
  if (py::isinstance<py::type>(obj)) {
    if (obj.is(py::type::of(py::float_(0.0)))) return DType::Float64;
    if (obj.is(py::type::of(py::int_(0)))) return DType::Int64;
    if (obj.is(py::type::of(py::bool_(false)))) return DType::Bool;
  }
  throw py::type_error("expected a dtype, got " + std::string(py::str(obj)));
}

Tensor from_numpy(py::array arr) {
  DType dt = dtype_of_array(arr);
  int64_t isz = itemsize(dt);
  int64_t nd = arr.ndim();
  Shape sizes, strides;
  char* data = static_cast<char*>(const_cast<void*>(arr.data()));
  int64_t lo = 0, hi = 0;  // byte extent relative to data
  for (int64_t d = 0; d < nd; ++d) {
    int64_t s = arr.shape(d), st = arr.strides(d);
    if (st % isz != 0) throw py::value_error("numpy strides must be multiples of the item size");
    sizes.push_back(s);
    strides.push_back(st / isz);
    if (s > 0) {
      int64_t span = (s - 1) * st;
      if (span < 0) lo += span;
      else hi += span;
    }
  }
  int64_t numel = numel_of(sizes);
  size_t nbytes = numel == 0 ? 0 : size_t(hi - lo + isz);
  char* base = data + lo;
  auto* keep = new py::object(arr);
  bool writeable = arr.writeable();
  auto storage = make_ref<StorageImpl>(base, nbytes, StorageImpl::Kind::External, [keep] {
    py::gil_scoped_acquire gil;
    delete keep;
  }, !writeable);
  return make_tensor(storage, sizes, strides, numel == 0 ? 0 : -lo / isz, dt);
}

py::array to_numpy(const Tensor& t_in) {
  Tensor t = t_in;
  if (t.dtype() == DType::BFloat16 || is_float8(t.dtype())) t = t.to(DType::Float32);
  const char* fmt = np_format(t.dtype());
  std::vector<py::ssize_t> shape, strides;
  for (int64_t d = 0; d < t.dim(); ++d) {
    shape.push_back(t.size(d));
    strides.push_back(t.stride(d) * t.element_size());
  }
  auto* holder = new Tensor(t.detach());
  py::capsule owner(holder, [](void* p) { delete static_cast<Tensor*>(p); });
  py::array arr(py::dtype(fmt), shape, strides, t.numel() ? t.data_ptr() : nullptr, owner);
  // Read-only storage (a memory-mapped safetensors file) must not be written through NumPy: the
  // pages are mapped PROT_READ and a write would crash the process.
  if (t.storage()->read_only()) arr.attr("setflags")(py::arg("write") = false);
  return arr;
}

Tensor tensor_from(py::handle obj, std::optional<DType> dtype) {
  if (py::isinstance<Tensor>(obj)) {
    Tensor t = obj.cast<Tensor>().detach().clone();
    return dtype ? t.to(*dtype) : t;
  }
  if (py::isinstance<py::bool_>(obj)) return scalar_tensor(obj.cast<bool>(), dtype.value_or(DType::Bool));
  if (py::isinstance<py::int_>(obj)) return scalar_tensor(obj.cast<int64_t>(), dtype.value_or(DType::Int64));
  if (py::isinstance<py::float_>(obj)) return scalar_tensor(obj.cast<double>(), dtype.value_or(default_float_dtype()));
  py::module_ np = py::module_::import("numpy");
  if (is_sequence(obj)) {
    // Tensors inside lists become numbers first (as torch.tensor does for 0-d tensors).
    py::array arr = np.attr("asarray")(obj);
    if (arr.dtype().kind() == 'O') throw py::type_error("tensor(): could not infer a dtype from a ragged or mixed sequence");
    Tensor t = from_numpy(arr).clone();
    if (!dtype) {
      if (t.dtype() == DType::Float64) t = t.to(default_float_dtype());
      else if (is_integral(t.dtype())) t = t.to(DType::Int64);
    }
    return dtype ? t.to(*dtype) : t;
  }
  if (py::isinstance<py::array>(obj)) {
    Tensor t = from_numpy(py::reinterpret_borrow<py::array>(obj)).clone();
    return dtype ? t.to(*dtype) : t;
  }
  if (py::hasattr(obj, "__array__")) {
    py::array arr = np.attr("asarray")(obj);
    Tensor t = from_numpy(arr).clone();
    return dtype ? t.to(*dtype) : t;
  }
  throw py::type_error("tensor(): cannot convert " + std::string(py::str(py::type::of(obj))) + " to a tensor");
}

ops::Value value_from(py::handle obj, const ops::Param& p, const std::string& op) {
  using T = ops::Param::Type;
  if (obj.is_none()) return ops::Value();
  switch (p.type) {
    case T::Tensor: {
      if (py::isinstance<Tensor>(obj)) return obj.cast<Tensor>();
      if (py::isinstance<py::bool_>(obj)) return wrap_scalar(obj.cast<bool>());
      if (py::isinstance<py::int_>(obj)) return wrap_scalar(obj.cast<int64_t>());
      if (py::isinstance<py::float_>(obj)) return wrap_scalar(obj.cast<double>());
      return tensor_from(obj, std::nullopt);
    }
    case T::TensorList: {
      std::vector<Tensor> ts;
      for (py::handle h : obj) {
        if (h.is_none()) ts.emplace_back();
        else if (py::isinstance<Tensor>(h)) ts.push_back(h.cast<Tensor>());
        else ts.push_back(tensor_from(h, std::nullopt));
      }
      return ts;
    }
    case T::Scalar:
      if (py::isinstance<py::bool_>(obj)) return Scalar(obj.cast<bool>());
      if (py::isinstance<py::int_>(obj)) return Scalar(obj.cast<int64_t>());
      if (py::isinstance<py::float_>(obj)) return Scalar(obj.cast<double>());
      if (py::isinstance<Tensor>(obj)) return obj.cast<Tensor>().item();
      break;
    case T::Int:
      if (py::isinstance<py::bool_>(obj)) return int64_t(obj.cast<bool>());
      if (py::isinstance<py::int_>(obj)) return obj.cast<int64_t>();
      if (py::isinstance<Tensor>(obj)) return obj.cast<Tensor>().item<int64_t>();
      break;
    case T::Float:
      if (py::isinstance<py::float_>(obj) || py::isinstance<py::int_>(obj)) return obj.cast<double>();
      if (py::isinstance<Tensor>(obj)) return obj.cast<Tensor>().item<double>();
      if (py::isinstance<py::str>(obj)) {
        std::string s = obj.cast<std::string>();
        if (s == "fro") return 2.0;  // norm(p='fro')
        if (s == "inf") return std::numeric_limits<double>::infinity();
      }
      break;
    case T::Bool:
      if (py::isinstance<py::bool_>(obj)) return obj.cast<bool>();
      break;
    case T::IntList:
      if (py::isinstance<py::int_>(obj)) return std::vector<int64_t>{obj.cast<int64_t>()};
      if (is_sequence(obj) || py::isinstance<py::iterable>(obj)) {
        std::vector<int64_t> v;
        for (py::handle h : obj) v.push_back(h.cast<int64_t>());
        return v;
      }
      break;
    case T::FloatList:
      if (py::isinstance<py::float_>(obj) || py::isinstance<py::int_>(obj)) return std::vector<double>{obj.cast<double>()};
      if (is_sequence(obj)) {
        std::vector<double> v;
        for (py::handle h : obj) v.push_back(h.cast<double>());
        return v;
      }
      break;
    case T::Str:
      if (py::isinstance<py::str>(obj)) return obj.cast<std::string>();
      break;
    case T::DType:
      return dtype_from(obj);
  }
  throw py::type_error(op + "(): argument '" + p.name + "' (" + p.type_str + ") got " +
                       std::string(py::str(py::type::of(obj).attr("__name__"))));
}

std::vector<TensorIndex> index_from(py::handle obj) {
  std::vector<TensorIndex> out;
  auto one = [&](py::handle h) {
    if (h.is_none()) out.emplace_back(NewAxis);
    else if (h.is(py::ellipsis())) out.emplace_back(Ellipsis);
    else if (py::isinstance<py::bool_>(h)) out.emplace_back(h.cast<bool>());
    else if (py::isinstance<py::int_>(h)) out.emplace_back(h.cast<int64_t>());
    else if (py::isinstance<py::slice>(h)) {
      auto get = [&](const char* attr) -> std::optional<int64_t> {
        py::object v = h.attr(attr);
        if (v.is_none()) return std::nullopt;
        return v.cast<int64_t>();
      };
      out.emplace_back(Slice(get("start"), get("stop"), get("step")));
    } else if (py::isinstance<Tensor>(h)) out.emplace_back(h.cast<Tensor>());
    else {
      Tensor t = tensor_from(h, std::nullopt);
      if (t.dtype() != DType::Bool && !is_integral(t.dtype()))
        throw py::index_error("only integers, slices (`:`), ellipsis (`...`), None and long or bool tensors are valid indices");
      out.emplace_back(t);
    }
  };
  if (py::isinstance<py::tuple>(obj))
    for (py::handle h : obj) one(h);
  else
    one(obj);
  return out;
}

Tensor batch_of(py::object obj) {
  if (obj.is_none()) return Tensor();
  Tensor t = tensor_from(obj, DType::Int64);
  return t.dim() == 1 ? t.unsqueeze(0) : t;
}

py::dict dict_of(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  py::dict d;
  for (const auto& [k, v] : tensors) d[py::str(k)] = v;
  return d;
}

py::dict state_dict_of(const nn::Module& module) { return dict_of(module.state_dict()); }

}  // namespace foundry::python
