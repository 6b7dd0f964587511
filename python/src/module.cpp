// foundry._C: the Tensor type, dtypes, grad modes, autograd functions, and a generic entry point
// that calls any registry op by name with Python arguments (foundry/__init__.py turns every
// registry op into foundry.<name> and a Tensor method).
#include <limits>
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "convert.h"
#include "foundry/autograd/autograd.h"
#include "foundry/autograd/node.h"
#include "foundry/core/allocator.h"
#include "foundry/core/cpu.h"
#include "foundry/core/leak_report.h"
#include "foundry/core/parallel.h"
#include "foundry/ops/catalog.h"
#include "foundry/ops/ops.h"

namespace py = pybind11;
using namespace foundry;
using foundry::python::from_numpy;
using foundry::python::index_from;
using foundry::python::tensor_from;
using foundry::python::to_numpy;
using foundry::python::value_from;

namespace foundry::python {
void bind_text(py::module_& m);
void bind_io(py::module_& m);
void bind_models(py::module_& m);
void bind_quant(py::module_& m);
void bind_gguf(py::module_& m);
void bind_peft(py::module_& m);
void bind_finetune(py::module_& m);
void bind_track(py::module_& m);
void bind_eval(py::module_& m);
}

namespace {

py::object wrap_outputs(const ops::OpDef& op, std::vector<Tensor> outs) {
  if (op.schema.returns_list) return py::cast(outs);
  if (outs.size() == 1) return py::cast(outs[0]);
  py::tuple t(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) t[i] = py::cast(outs[i]);
  return t;
}

ops::Args bind_python(const ops::OpDef& op, py::args args, py::kwargs kwargs) {
  const auto& params = op.schema.params;
  std::vector<ops::Value> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    if (i >= params.size())
      throw py::type_error(op.name() + "() takes " + std::to_string(params.size()) + " arguments but " +
                           std::to_string(args.size()) + " were given");
    positional.push_back(value_from(args[i], params[i], op.name()));
  }
  std::vector<std::pair<std::string, ops::Value>> kw;
  for (auto item : kwargs) {
    std::string name = item.first.cast<std::string>();
    if (name == "self") name = "input";
    int idx = op.schema.index_of(name);
    if (idx < 0) throw py::type_error(op.name() + "() got an unexpected keyword argument '" + name + "'");
    kw.push_back({name, value_from(item.second, params[size_t(idx)], op.name())});
  }
  return ops::bind(op, std::move(positional), std::move(kw));
}

py::object call_op(const std::string& name, py::args args, py::kwargs kwargs) {
  const ops::OpDef& op = ops::find_op(name);
  ops::Args bound = bind_python(op, args, kwargs);
  std::vector<Tensor> outs;
  {
    py::gil_scoped_release nogil;
    outs = ops::call(op, bound.values());
  }
  return wrap_outputs(op, std::move(outs));
}

Tensor call_inplace_op(const std::string& name, Tensor self, py::args args, py::kwargs kwargs) {
  const ops::OpDef& op = ops::find_op(name);
  py::list full;
  full.append(self);
  for (auto a : args) full.append(a);
  ops::Args bound = bind_python(op, py::tuple(full), kwargs);
  py::gil_scoped_release nogil;
  ops::call_inplace(op, self, bound.values());
  return self;
}

Tensor as_tensor_like(py::handle other, const Tensor& like) {
  if (py::isinstance<Tensor>(other)) return other.cast<Tensor>();
  if (py::isinstance<py::bool_>(other)) return wrap_scalar(other.cast<bool>());
  if (py::isinstance<py::int_>(other)) return wrap_scalar(other.cast<int64_t>());
  if (py::isinstance<py::float_>(other)) return wrap_scalar(other.cast<double>());
  return tensor_from(other, std::nullopt);
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "Foundry: tensors with autograd, ops with PyTorch semantics";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const foundry::IndexError& e) {
      PyErr_SetString(PyExc_IndexError, e.what());
    } catch (const foundry::TypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    } catch (const foundry::ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const foundry::NotImplementedError& e) {
      PyErr_SetString(PyExc_NotImplementedError, e.what());
    } catch (const foundry::IOError& e) {
      PyErr_SetString(PyExc_OSError, e.what());
    } catch (const foundry::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });

  py::enum_<DType> dt(m, "dtype");
  for (int i = 0; i < kNumDTypes; ++i) dt.value(std::string(dtype_name(DType(i))).c_str(), DType(i));
  dt.def_property_readonly("is_floating_point", [](DType d) { return is_floating(d); });
  dt.def_property_readonly("itemsize", [](DType d) { return itemsize(d); });
  dt.def("__repr__", [](DType d) { return "foundry." + std::string(dtype_name(d)); });

  py::class_<Tensor> t(m, "Tensor");
  t.def(py::init([](py::object obj) { return tensor_from(obj, std::nullopt); }))
      .def_property_readonly("shape", [](const Tensor& x) { return py::tuple(py::cast(x.sizes().vec())); })
      .def("size", [](const Tensor& x, py::object dim) -> py::object {
        if (dim.is_none()) return py::tuple(py::cast(x.sizes().vec()));
        return py::int_(x.size(dim.cast<int64_t>()));
      }, py::arg("dim") = py::none())
      .def("stride", [](const Tensor& x, py::object dim) -> py::object {
        if (dim.is_none()) return py::tuple(py::cast(x.strides().vec()));
        return py::int_(x.stride(dim.cast<int64_t>()));
      }, py::arg("dim") = py::none())
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("ndim", &Tensor::dim)
      .def("dim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("element_size", &Tensor::element_size)
      .def("storage_offset", &Tensor::storage_offset)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("is_floating_point", &Tensor::is_floating_point)
      .def_property_readonly("is_leaf", &Tensor::is_leaf)
      .def_property("requires_grad", &Tensor::requires_grad, [](Tensor& x, bool r) { x.requires_grad_(r); })
      .def("requires_grad_", [](Tensor& x, bool r) { return x.requires_grad_(r); }, py::arg("requires_grad") = true)
      .def_property(
          "grad",
          [](const Tensor& t) -> py::object {
            Tensor g = t.grad();
            return g.defined() ? py::cast(g) : py::none();  // None until a backward reaches it, as torch
          },
          [](Tensor& t, py::object g) { t.set_grad(g.is_none() ? Tensor() : g.cast<Tensor>()); })
      .def_property_readonly("grad_fn", [](const Tensor& x) -> py::object {
        if (!x.grad_fn()) return py::none();
        return py::str(x.grad_fn()->name());
      })
      .def_property_readonly("_version", &Tensor::version)
      .def("backward", [](const Tensor& x, py::object gradient, bool retain_graph, bool create_graph) {
        Tensor g = gradient.is_none() ? Tensor() : as_tensor_like(gradient, x);
        py::gil_scoped_release nogil;
        x.backward(g, retain_graph, create_graph);
      }, py::arg("gradient") = py::none(), py::arg("retain_graph") = false, py::arg("create_graph") = false)
      .def("detach", &Tensor::detach)
      .def("detach_", [](Tensor& x) { return x.detach_(); })
      .def("retain_grad", &Tensor::retain_grad)
      .def_property_readonly("retains_grad", &Tensor::retains_grad)
      .def("register_hook", [](const Tensor& x, py::function fn) {
        return x.register_hook([fn](const Tensor& g) -> Tensor {
          py::gil_scoped_acquire gil;
          py::object r = fn(g);
          return r.is_none() ? Tensor() : r.cast<Tensor>();
        });
      })
      .def("item", [](const Tensor& x) -> py::object {
        Scalar s = x.item();
        if (s.is_bool()) return py::bool_(s.to_bool());
        if (s.is_int()) return py::int_(s.to_int());
        return py::float_(s.to_double());
      })
      .def("numpy", [](const Tensor& x) {
        if (x.requires_grad())
          throw py::value_error("can't call numpy() on a tensor that requires grad; use tensor.detach().numpy()");
        return to_numpy(x);
      })
      .def("tolist", [](const Tensor& x) { return to_numpy(x.detach()).attr("tolist")(); })
      .def("__array__", [](const Tensor& x, py::object dtype) {
        py::array a = to_numpy(x.detach());
        return dtype.is_none() ? py::object(a) : a.attr("astype")(dtype);
      }, py::arg("dtype") = py::none())
      .def("__repr__", &Tensor::str)
      .def("__len__", [](const Tensor& x) {
        if (x.dim() == 0) throw py::type_error("len() of a 0-d tensor");
        return x.size(0);
      })
      .def("__bool__", [](const Tensor& x) {
        if (x.numel() != 1) throw py::value_error("Boolean value of Tensor with more than one value is ambiguous");
        return x.item().to_bool();
      })
      .def("__float__", [](const Tensor& x) { return x.item().to_double(); })
      .def("__int__", [](const Tensor& x) { return x.item().to_int(); })
      .def("__index__", [](const Tensor& x) {
        if (!is_integral(x.dtype(), true) || x.numel() != 1) throw py::type_error("only integer tensors of a single element can be converted to an index");
        return x.item().to_int();
      })
      .def("__getitem__", [](const Tensor& x, py::object idx) { return x.index(index_from(idx)); })
      .def("__setitem__", [](Tensor& x, py::object idx, py::object value) {
        auto indices = index_from(idx);
        Tensor v = py::isinstance<Tensor>(value) ? value.cast<Tensor>() : tensor_from(value, x.dtype());
        py::gil_scoped_release nogil;
        x.index_put_(indices, v);
      })
      .def("clone", &Tensor::clone)
      .def("contiguous", &Tensor::contiguous)
      .def("copy_", [](Tensor& x, const Tensor& src) { return x.copy_(src); })
      .def("fill_", [](Tensor& x, py::object v) {
        Scalar s = py::isinstance<py::bool_>(v) ? Scalar(v.cast<bool>())
                   : py::isinstance<py::int_>(v) ? Scalar(v.cast<int64_t>())
                                                  : Scalar(v.cast<double>());
        return x.fill_(s);
      })
      .def("zero_", [](Tensor& x) { return x.zero_(); })
      .def("data_ptr", [](const Tensor& x) { return reinterpret_cast<uintptr_t>(x.data_ptr()); });

  m.def("_call", &call_op, "Calls a registry op by name");
  m.def("_call_inplace", &call_inplace_op, "Calls a registry op in place on its first argument");
  m.def("_op_names", [] {
    std::vector<std::string> names;
    for (const auto& op : ops::Registry::instance().all()) names.push_back(op->name());
    return names;
  });
  m.def("_op_schema", [](const std::string& name) { return ops::find_op(name).schema_text; });
  m.def("_op_info", [](const std::string& name) {
    const ops::OpDef& op = ops::find_op(name);
    py::dict d;
    d["schema"] = op.schema_text;
    d["doc"] = op.doc;
    d["family"] = op.family;
    d["differentiable"] = op.differentiable;
    d["random"] = op.random;
    d["ref"] = op.ref;
    py::list params;
    for (const auto& p : op.schema.params) params.append(py::make_tuple(p.name, p.type_str, p.kwarg_only));
    d["params"] = params;
    return d;
  });
  m.def("_samples", [](const std::string& name, DType dtype) {
    const ops::OpDef& op = ops::find_op(name);
    py::list out;
    for (const auto& s : ops::generate_samples(op, dtype)) {
      py::list args;
      for (const auto& v : s.args) {
        if (v.is_none()) args.append(py::none());
        else if (v.is_tensor()) {
          const Tensor& tt = v.tensor();
          if (!tt.defined()) args.append(py::none());
          else if (tt.impl()->wrapped_number) {
            Scalar sc = tt.item();
            args.append(sc.is_bool() ? py::object(py::bool_(sc.to_bool())) : sc.is_int() ? py::object(py::int_(sc.to_int())) : py::object(py::float_(sc.to_double())));
          } else args.append(tt);
        } else if (v.is_tensor_list()) {
          py::list l;
          for (const Tensor& x : v.tensor_list()) l.append(x.defined() ? py::cast(x) : py::none());
          args.append(l);
        } else if (v.is_scalar()) {
          Scalar sc = v.scalar();
          args.append(sc.is_bool() ? py::object(py::bool_(sc.to_bool())) : sc.is_int() ? py::object(py::int_(sc.to_int())) : py::object(py::float_(sc.to_double())));
        } else if (v.is_int()) args.append(v.to_int());
        else if (v.is_double()) args.append(v.to_double());
        else if (v.is_bool()) args.append(v.to_bool());
        else if (v.is_int_list()) args.append(py::cast(v.int_list()));
        else if (v.is_string()) args.append(v.str());
        else if (v.is_dtype()) args.append(v.dtype());
        else args.append(py::cast(v.double_list()));
      }
      out.append(py::make_tuple(args, s.note, s.gradcheck));
    }
    return out;
  });
  m.def("_catalog_json", [](const std::string& manifest) { return ops::catalog_json(manifest); },
        py::arg("fixture_manifest") = "");

  m.def("tensor", [](py::object obj, py::object dtype, bool requires_grad) {
    Tensor x = tensor_from(obj, dtype.is_none() ? std::nullopt : std::optional<DType>(python::dtype_from(dtype)));
    if (requires_grad) x.requires_grad_();
    return x;
  }, py::arg("data"), py::arg("dtype") = py::none(), py::arg("requires_grad") = false);
  m.def("from_numpy", [](py::array a) { return from_numpy(a); });
  // As torch.manual_seed: any integer in [-2^63, 2^64), a negative one taken modulo 2^64.
  m.def("manual_seed", [](const py::int_& seed) {
    const py::int_ all_ones(std::numeric_limits<uint64_t>::max());
    if (seed < py::int_(std::numeric_limits<int64_t>::min()) || seed > all_ones)
      throw std::runtime_error("Overflow when unpacking long");  // torch's words
    manual_seed(py::int_(seed & all_ones).cast<uint64_t>());
  }, py::arg("seed"));
  m.def("get_num_threads", &get_num_threads);
  m.def("set_num_threads", [](int n) {
    if (n <= 0) throw std::runtime_error("set_num_threads expects a positive integer");  // torch's words
    set_num_threads(n);
  }, py::arg("n"));
  m.def("threads_in_use", &threads_in_use);
  m.def("set_pool_adapts_to_load", &set_pool_adapts_to_load, py::arg("on"));
  m.def("is_grad_enabled", &autograd::is_grad_enabled);
  m.def("_set_grad_enabled", &autograd::set_grad_enabled);
  m.def("_is_inference_mode", &autograd::is_inference_mode);
  m.def("get_default_dtype", &default_float_dtype);
  m.def("set_default_dtype", [](py::object d) { set_default_float_dtype(python::dtype_from(d)); });
  m.def("promote_types", [](py::object a, py::object b) { return promote_types(python::dtype_from(a), python::dtype_from(b)); });
  m.def("_wrap_scalar", [](py::object v) {
    if (py::isinstance<py::bool_>(v)) return wrap_scalar(v.cast<bool>());
    if (py::isinstance<py::int_>(v)) return wrap_scalar(v.cast<int64_t>());
    return wrap_scalar(v.cast<double>());
  });
  m.def("memory_stats", [] {
    // torch.cuda.memory_stats()'s key names (see allocator.h), then Foundry's own short names.
    py::dict d;
    for (const auto& [k, v] : memory_stats()) d[py::str(k)] = v;
    auto s = allocator::stats();
    d["current_bytes"] = s.current_bytes;
    d["peak_bytes"] = s.peak_bytes;
    d["cached_bytes"] = s.cached_bytes;
    d["live_blocks"] = s.live_blocks;
    d["num_allocs"] = s.num_allocs;
    return d;
  }, "allocator statistics: allocated_bytes.all.current / .peak, reserved_bytes.all.current / .peak, "
     "allocation.all.allocated / .freed, inactive_split (cached blocks), ... as torch.cuda.memory_stats names them");
  m.def("reset_peak_memory_stats", &reset_peak_memory_stats);
  m.def("cpu_capability", &cpu_capability,
        "the instruction set the SIMD kernels use here (Highway's target name, e.g. AVX3_ZEN4 or AVX2; "
        "' VNNI' when the AVX-512 VNNI quantized kernels run); FOUNDRY_MAX_ISA=avx2|sse4 caps it");
  m.def("memory_allocated", [] { return allocator::stats().current_bytes; });
  m.def("max_memory_allocated", [] { return allocator::stats().peak_bytes; });
  m.def("memory_reserved", [] { auto s = allocator::stats(); return s.current_bytes + s.cached_bytes; });
  m.def("max_memory_reserved", [] { return allocator::stats().peak_reserved_bytes; });
  m.def("empty_cache", &allocator::empty_cache);
  // Live-tensor tracking (foundry/core/leak_report.h): on in debug builds or with FOUNDRY_LEAK_REPORT=1.
  m.def("set_tensor_tracking", &debug::set_tensor_tracking, py::arg("on"),
        "register every new tensor with its creation stack (for live_tensors_report)");
  m.def("live_tensor_count", &debug::live_tensor_count);
  m.def("live_tensors_report", [] { return debug::live_tensors_report(); },
        "tensors alive now, grouped by dtype, shape and creation stack (what debug builds print at exit)");

  foundry::python::bind_text(m);
  foundry::python::bind_io(m);
  foundry::python::bind_models(m);
  foundry::python::bind_quant(m);
  foundry::python::bind_gguf(m);
  foundry::python::bind_peft(m);
  foundry::python::bind_finetune(m);
  foundry::python::bind_track(m);
  foundry::python::bind_eval(m);

  py::module_ ag = m.def_submodule("autograd", "automatic differentiation");
  // torch.autograd.grad / backward take a tensor or a sequence of tensors for each argument.
  auto tensor_seq = [](py::handle h) {
    if (py::isinstance<Tensor>(h)) return std::vector<Tensor>{h.cast<Tensor>()};
    std::vector<Tensor> out;
    for (py::handle t : py::iter(h)) out.push_back(t.is_none() ? Tensor() : t.cast<Tensor>());
    return out;
  };
  ag.def("grad", [tensor_seq](py::object outputs_arg, py::object inputs_arg, py::object grad_outputs,
                    py::object retain_graph, bool create_graph, bool allow_unused) {
    const std::vector<Tensor> outputs = tensor_seq(outputs_arg), inputs = tensor_seq(inputs_arg);
    std::vector<Tensor> gos;
    if (!grad_outputs.is_none()) gos = tensor_seq(grad_outputs);
    std::optional<bool> retain;
    if (!retain_graph.is_none()) retain = retain_graph.cast<bool>();
    std::vector<Tensor> r;
    {
      py::gil_scoped_release nogil;
      r = autograd::grad(outputs, inputs, gos, retain, create_graph, allow_unused);
    }
    py::tuple out(r.size());
    for (size_t i = 0; i < r.size(); ++i) out[i] = r[i].defined() ? py::cast(r[i]) : py::none();
    return out;
  }, py::arg("outputs"), py::arg("inputs"), py::arg("grad_outputs") = py::none(), py::arg("retain_graph") = py::none(),
     py::arg("create_graph") = false, py::arg("allow_unused") = false);
  ag.def("backward", [tensor_seq](py::object outputs_arg, py::object grads, bool retain_graph, bool create_graph) {
    const std::vector<Tensor> outputs = tensor_seq(outputs_arg);
    std::vector<Tensor> gs;
    if (!grads.is_none()) gs = tensor_seq(grads);
    py::gil_scoped_release nogil;
    autograd::backward(outputs, gs, retain_graph, create_graph);
  }, py::arg("tensors"), py::arg("grad_tensors") = py::none(), py::arg("retain_graph") = false, py::arg("create_graph") = false);
  ag.def("gradcheck", [](py::function fn, std::vector<Tensor> inputs, double eps, double atol, double rtol, bool raise_exception) {
    autograd::GradcheckOptions o{eps, atol, rtol, raise_exception};
    auto f = [fn](const std::vector<Tensor>& xs) {
      py::gil_scoped_acquire gil;
      py::object r = fn(*py::cast(xs));
      if (py::isinstance<Tensor>(r)) return std::vector<Tensor>{r.cast<Tensor>()};
      return r.cast<std::vector<Tensor>>();
    };
    return autograd::gradcheck(f, inputs, o);
  }, py::arg("func"), py::arg("inputs"), py::arg("eps") = 1e-6, py::arg("atol") = 1e-5, py::arg("rtol") = 1e-3,
     py::arg("raise_exception") = true);
}
