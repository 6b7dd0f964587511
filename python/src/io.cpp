// File formats in Python: safetensors (load_file/save_file/load/save/safe_open, as the
// `safetensors` package names them), sharded safetensors, .npy/.npz, and training checkpoints.
// Malformed or unreadable files raise OSError (foundry::IOError) with the file and the rule.
#include <pybind11/stl.h>

#include "convert.h"
#include "foundry/io/checkpoint.h"
#include "foundry/io/npy.h"
#include "foundry/io/safetensors.h"

namespace py = pybind11;
using namespace foundry;
using namespace foundry::io;

namespace foundry::python {

namespace {

// Tensors given to a writer: foundry Tensors, or anything NumPy can view (arrays, torch CPU
// tensors of NumPy dtypes), shared without a copy.
Tensor as_tensor(py::handle v, const std::string& key) {
  if (py::isinstance<Tensor>(v)) return v.cast<Tensor>().detach();
  if (py::isinstance<py::array>(v) || py::hasattr(v, "__array__")) {
    py::object arr = py::module_::import("numpy").attr("asarray")(v);
    return from_numpy(py::reinterpret_borrow<py::array>(arr));
  }
  throw py::type_error("value for '" + key + "' must be a foundry.Tensor or an array, not " +
                       std::string(py::str(py::type::of(v).attr("__name__"))));
}

std::map<std::string, Tensor> tensor_map(py::handle d) {
  if (!py::isinstance<py::dict>(d)) throw py::type_error("expected a dict of name -> tensor");
  std::map<std::string, Tensor> out;
  for (auto [k, v] : py::reinterpret_borrow<py::dict>(d)) {
    if (!py::isinstance<py::str>(k)) throw py::type_error("tensor names must be str, got " + std::string(py::repr(k)));
    std::string key = k.cast<std::string>();
    out[key] = as_tensor(v, key);
  }
  return out;
}

std::map<std::string, std::string> string_map(py::handle d, const char* what) {
  std::map<std::string, std::string> out;
  if (d.is_none()) return out;
  if (!py::isinstance<py::dict>(d)) throw py::type_error(std::string(what) + " must be a dict of str -> str");
  for (auto [k, v] : py::reinterpret_borrow<py::dict>(d)) {
    if (!py::isinstance<py::str>(k) || !py::isinstance<py::str>(v))
      throw py::type_error(std::string(what) + " must map str to str (safetensors stores only strings), got " +
                           std::string(py::repr(k)) + ": " + std::string(py::repr(v)));
    out[k.cast<std::string>()] = v.cast<std::string>();
  }
  return out;
}

py::dict to_dict(const std::map<std::string, Tensor>& m) {
  py::dict d;
  for (const auto& [k, t] : m) d[py::str(k)] = py::cast(t);
  return d;
}

// 5000000000, "5GB" (10^9), "500MB", "2GiB" (2^30): huggingface_hub's convention.
uint64_t parse_size(py::handle v) {
  if (py::isinstance<py::int_>(v)) {
    int64_t n = v.cast<int64_t>();
    if (n <= 0) throw py::value_error("max_shard_size must be positive");
    return uint64_t(n);
  }
  std::string s = v.cast<std::string>();
  static const std::pair<const char*, double> units[] = {{"GIB", 1073741824.0}, {"MIB", 1048576.0}, {"KIB", 1024.0},
                                                         {"GB", 1e9},           {"MB", 1e6},        {"KB", 1e3},
                                                         {"B", 1.0}};
  std::string up;
  for (char c : s) up += char(std::toupper(static_cast<unsigned char>(c)));
  for (const auto& [u, mul] : units) {
    size_t n = std::strlen(u);
    if (up.size() > n && up.compare(up.size() - n, n, u) == 0) {
      try {
        double x = std::stod(up.substr(0, up.size() - n));
        if (x > 0) return uint64_t(x * mul);
      } catch (const std::exception&) {
      }
      break;
    }
  }
  throw py::value_error("max_shard_size '" + s + "' is not a size like 5000000000, \"5GB\" or \"500MB\"");
}

std::string json_text(py::handle v) {
  if (v.is_none()) return "";
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  return py::module_::import("json").attr("dumps")(v).cast<std::string>();
}

}  // namespace

void bind_io(py::module_& m) {
  // ---- safetensors --------------------------------------------------------------------------
  m.def(
      "load_file",
      [](const std::string& path, bool copy) {
        SafetensorsContents c;
        {
          py::gil_scoped_release nogil;
          c = load_safetensors(path, copy);
        }
        return to_dict(c.tensors);
      },
      py::arg("filename"), py::arg("copy") = false,
      "Loads a safetensors file into a dict name -> Tensor (sorted by name). Tensors are read-only views over a "
      "memory map unless copy=True. Raises OSError naming the file and the broken rule for a malformed file.");
  m.def(
      "save_file",
      [](py::handle tensors, const std::string& path, py::handle metadata) {
        auto t = tensor_map(tensors);
        auto md = string_map(metadata, "metadata");
        py::gil_scoped_release nogil;
        save_safetensors(path, t, md);
      },
      py::arg("tensors"), py::arg("filename"), py::arg("metadata") = py::none(),
      "Writes a dict name -> Tensor (or NumPy array) as a safetensors file, atomically, in upstream's layout.");
  m.def(
      "load",
      [](py::bytes data) {
        std::string bytes = data;
        SafetensorsFile f = SafetensorsFile::from_bytes(bytes, "<bytes>");
        return to_dict(f.load_all());
      },
      py::arg("data"), "Parses safetensors bytes into a dict name -> Tensor.");
  m.def(
      "save",
      [](py::handle tensors, py::handle metadata) {
        std::string bytes = serialize_safetensors(tensor_map(tensors), string_map(metadata, "metadata"));
        return py::bytes(bytes);
      },
      py::arg("tensors"), py::arg("metadata") = py::none(), "The bytes of a safetensors file.");

  py::class_<SafetensorsFile>(m, "SafetensorsFile",
                              "An open safetensors file (see safe_open): keys(), get_tensor(name), metadata().")
      .def("keys", [](const SafetensorsFile& f) {
        std::vector<std::string> k = f.names();
        std::sort(k.begin(), k.end());
        return k;
      })
      .def("offset_keys", &SafetensorsFile::names, "names in file order")
      .def("get_tensor", [](const SafetensorsFile& f, const std::string& name) {
        if (!f.contains(name)) throw py::key_error("no tensor named '" + name + "' in " + f.path());
        return f.get(name);
      }, py::arg("name"))
      .def("metadata", [](const SafetensorsFile& f) -> py::object {
        if (!f.has_metadata()) return py::none();
        return py::cast(f.metadata());
      })
      .def("__contains__", &SafetensorsFile::contains)
      .def("__len__", &SafetensorsFile::size)
      .def("__enter__", [](const SafetensorsFile& f) { return f; })
      .def("__exit__", [](const SafetensorsFile&, py::args) { return false; })
      .def("__repr__", [](const SafetensorsFile& f) {
        return "SafetensorsFile('" + f.path() + "', " + std::to_string(f.size()) + " tensors)";
      });
  m.def(
      "safe_open",
      [](const std::string& path, const std::string& framework, const std::string& device) {
        if (device != "cpu") throw py::value_error("safe_open: only device='cpu' is supported");
        py::gil_scoped_release nogil;
        return SafetensorsFile::open(path);
      },
      py::arg("filename"), py::arg("framework") = "foundry", py::arg("device") = "cpu",
      "Opens a safetensors file lazily (memory map + header); use as a context manager like safetensors.safe_open.");

  m.def(
      "load_sharded",
      [](const std::string& path) {
        std::map<std::string, Tensor> t;
        {
          py::gil_scoped_release nogil;
          t = ShardedSafetensors::open(path).load_all();
        }
        return to_dict(t);
      },
      py::arg("path"),
      "Loads a sharded checkpoint (a model.safetensors.index.json, or a folder holding one or a model.safetensors).");
  m.def(
      "save_sharded",
      [](py::handle tensors, const std::string& dir, py::handle max_shard_size, py::handle metadata,
         const std::string& prefix) {
        auto t = tensor_map(tensors);
        auto md = metadata.is_none() ? std::map<std::string, std::string>{{"format", "pt"}} : string_map(metadata, "metadata");
        uint64_t max = parse_size(max_shard_size);
        py::gil_scoped_release nogil;
        return save_safetensors_sharded(dir, t, max, md, prefix);
      },
      py::arg("tensors"), py::arg("save_directory"), py::arg("max_shard_size") = "5GB", py::arg("metadata") = py::none(),
      py::arg("prefix") = "model",
      "Writes Hugging Face-style shards plus model.safetensors.index.json; returns the file names.");

  // ---- NumPy files --------------------------------------------------------------------------
  m.def("load_npy", [](const std::string& path) { return load_npy(path); }, py::arg("file"));
  m.def("save_npy", [](const std::string& path, py::handle t) { save_npy(path, as_tensor(t, "arr")); },
        py::arg("file"), py::arg("arr"));
  m.def("load_npz", [](const std::string& path) { return to_dict(load_npz(path)); }, py::arg("file"));
  m.def("save_npz", [](const std::string& path, py::handle arrays) { save_npz(path, tensor_map(arrays)); },
        py::arg("file"), py::arg("arrays"));

  // ---- training checkpoints -----------------------------------------------------------------
  m.def(
      "save_checkpoint",
      [](const std::string& root, int64_t step, py::dict components, int keep_last) {
        CheckpointState state;
        for (auto [k, v] : components) {
          std::string name = k.cast<std::string>();
          CheckpointComponent c;
          if (!py::isinstance<py::dict>(v))
            throw py::type_error("component '" + name + "' must be a dict with 'tensors' and/or 'json'");
          py::dict d = py::reinterpret_borrow<py::dict>(v);
          if (d.contains("tensors")) c.tensors = tensor_map(d["tensors"]);
          if (d.contains("json")) c.json = json_text(d["json"]);
          state.emplace(name, std::move(c));
        }
        py::gil_scoped_release nogil;
        return save_checkpoint(root, step, state, keep_last);
      },
      py::arg("root"), py::arg("step"), py::arg("components"), py::arg("keep_last") = 0,
      "Writes <root>/step-<step>/ atomically from {component: {'tensors': {...}, 'json': str or JSON-able}}; "
      "keep_last > 0 prunes older checkpoints. Returns the folder.");
  m.def(
      "load_checkpoint",
      [](const std::string& root, py::object step) -> py::object {
        std::optional<int64_t> s;
        if (step.is_none()) s = latest_checkpoint(root);
        else s = step.cast<int64_t>();
        if (!s) return py::none();
        CheckpointState state;
        {
          py::gil_scoped_release nogil;
          state = load_checkpoint(root, *s);
        }
        py::dict out;
        for (const auto& [name, c] : state) {
          py::dict d;
          d["tensors"] = to_dict(c.tensors);
          d["json"] = c.json.empty() ? py::object(py::none()) : py::object(py::str(c.json));
          out[py::str(name)] = d;
        }
        return py::make_tuple(*s, out);
      },
      py::arg("root"), py::arg("step") = py::none(),
      "Returns (step, {component: {'tensors': {...}, 'json': str or None}}) for the given or latest step; None when "
      "there is no checkpoint.");
  m.def("latest_checkpoint", [](const std::string& root) { return latest_checkpoint(root); }, py::arg("root"));
  m.def("list_checkpoints", [](const std::string& root) { return list_checkpoints(root); }, py::arg("root"));
}

}  // namespace foundry::python
