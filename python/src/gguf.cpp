// foundry.gguf: read and write GGUF files (docs/formats.md); malformed files raise.
#include <pybind11/stl.h>

#include "convert.h"
#include "foundry/core/error.h"
#include "foundry/io/gguf.h"

namespace py = pybind11;
using foundry::io::GGUFValue;

namespace foundry::python {

namespace {

const char* kTypeNames[] = {"uint8", "int8",  "uint16", "int16", "uint32", "int32", "float32",
                            "bool",  "string", "array", "uint64", "int64", "float64"};

GGUFValue::Type type_from(const std::string& name) {
  for (uint32_t i = 0; i < 13; ++i)
    if (name == kTypeNames[i]) return GGUFValue::Type(i);
  throw py::value_error("gguf: unknown value type '" + name + "'");
}

py::object to_py(const GGUFValue& v) {
  switch (v.type) {
    case GGUFValue::FLOAT32:
    case GGUFValue::FLOAT64: return py::float_(v.as_double());
    case GGUFValue::BOOL: return py::bool_(std::get<bool>(v.value));
    case GGUFValue::STRING: return py::str(v.as_string());
    case GGUFValue::ARRAY: {
      py::list l;
      for (const GGUFValue& e : v.as_array()) l.append(to_py(e));
      return l;
    }
    case GGUFValue::UINT64: return py::int_(std::get<uint64_t>(v.value));
    default: return py::int_(v.as_int());
  }
}

GGUFValue scalar_from(GGUFValue::Type t, py::handle o) {
  GGUFValue v;
  v.type = t;
  switch (t) {
    case GGUFValue::FLOAT32:
    case GGUFValue::FLOAT64: v.value = o.cast<double>(); break;
    case GGUFValue::BOOL: v.value = o.cast<bool>(); break;
    case GGUFValue::STRING: v.value = o.cast<std::string>(); break;
    case GGUFValue::UINT8:
    case GGUFValue::UINT16:
    case GGUFValue::UINT32:
    case GGUFValue::UINT64: v.value = o.cast<uint64_t>(); break;
    default: v.value = o.cast<int64_t>(); break;
  }
  return v;
}

}  // namespace

void bind_gguf(py::module_& m) {
  py::module_ g = m.def_submodule("gguf", "GGUF files (llama.cpp's format), versions 2 and 3");
  g.def(
      "read",
      [](const std::string& path) {
        io::GGUFFile f = io::GGUFFile::open(path);
        py::dict md;
        for (const std::string& k : f.keys()) md[py::str(k)] = to_py(f.metadata().at(k));
        py::dict types;
        for (const std::string& k : f.keys()) {
          const GGUFValue& v = f.metadata().at(k);
          types[py::str(k)] = v.type == GGUFValue::ARRAY
                                  ? std::string("array:") + kTypeNames[v.array_type]
                                  : std::string(kTypeNames[v.type]);
        }
        py::list tensors;
        for (const auto& t : f.tensors()) {
          py::dict d;
          d["name"] = t.name;
          d["shape"] = t.shape();
          d["dims"] = t.dims;
          d["type"] = t.ggml_type;
          d["type_name"] = io::ggml_type_info(t.ggml_type).name;
          d["offset"] = t.offset;
          d["nbytes"] = t.nbytes;
          tensors.append(d);
        }
        py::dict out;
        out["version"] = f.version();
        out["alignment"] = f.alignment();
        out["data_offset"] = f.data_offset();
        out["metadata"] = md;
        out["types"] = types;
        out["tensors"] = tensors;
        return out;
      },
      py::arg("path"), "header, metadata (values and types) and tensor infos");
  g.def(
      "tensor", [](const std::string& path, const std::string& name) { return io::GGUFFile::open(path).tensor(name); },
      py::arg("path"), py::arg("name"), "a tensor (float/int views; q4_0..q8_0 dequantized to float32)");
  g.def(
      "write",
      [](const std::string& path, py::list metadata, py::list tensors, uint64_t alignment) {
        std::vector<std::pair<std::string, GGUFValue>> md;
        for (py::handle item : metadata) {
          auto t = item.cast<py::tuple>();
          const std::string key = t[0].cast<std::string>(), type = t[1].cast<std::string>();
          if (type.rfind("array:", 0) == 0) {
            GGUFValue v;
            v.type = GGUFValue::ARRAY;
            v.array_type = type_from(type.substr(6));
            std::vector<GGUFValue> items;
            for (py::handle e : t[2]) items.push_back(scalar_from(v.array_type, e));
            v.value = std::move(items);
            md.emplace_back(key, std::move(v));
          } else {
            md.emplace_back(key, scalar_from(type_from(type), t[2]));
          }
        }
        std::vector<io::GGUFTensorData> ts;
        for (py::handle item : tensors) {
          auto t = item.cast<py::tuple>();
          ts.push_back({t[0].cast<std::string>(), t[1].cast<std::vector<int64_t>>(), t[2].cast<uint32_t>(),
                        t[3].cast<std::string>()});
        }
        io::write_gguf(path, md, ts, alignment);
      },
      py::arg("path"), py::arg("metadata"), py::arg("tensors"), py::arg("alignment") = 32,
      "metadata: [(key, type, value)] with types like 'uint32', 'string', 'array:float32'; "
      "tensors: [(name, shape, ggml_type, bytes)]");
}

}  // namespace foundry::python
