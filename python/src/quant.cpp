// foundry.quant: GGML block formats (quantize / dequantize / dot) over NumPy float32 arrays
// and bytes, for tests and tools; the traits table is foundry/quant/block_formats.h.
#include <cstring>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "foundry/core/error.h"
#include "foundry/quant/block_formats.h"
#include "foundry/quant/weight_only.h"

namespace py = pybind11;

namespace foundry::python {

namespace {

template <class T>
py::array_t<T> to_array(const std::vector<T>& v) {
  py::array_t<T> out{py::ssize_t(v.size())};
  if (!v.empty()) std::memcpy(out.mutable_data(), v.data(), v.size() * sizeof(T));
  return out;
}

template <class T>
std::vector<T> from_array(const py::array_t<T, py::array::c_style | py::array::forcecast>& a) {
  return std::vector<T>(a.data(), a.data() + a.size());
}

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

void bind_weight_only(py::module_& q) {
  q.def("nf4_codebook", [] { return to_array(std::vector<float>(quant::nf4_codebook(), quant::nf4_codebook() + 16)); });
  q.def("dynamic_map_signed",
        [] { return to_array(std::vector<float>(quant::dynamic_map_signed(), quant::dynamic_map_signed() + 256)); });
  q.def(
      "quantize_nf4",
      [](FloatArray x, bool double_quant) {
        const quant::NF4Weight w = quant::quantize_nf4(x.data(), int64_t(x.size()), double_quant);
        py::dict d;
        d["packed"] = to_array(w.packed);
        d["absmax"] = to_array(w.absmax);
        if (w.double_quant) {
          d["absmax_codes"] = to_array(w.absmax_codes);
          d["offset"] = w.offset;
          d["nested_absmax"] = to_array(w.nested_absmax);
        }
        return d;
      },
      py::arg("x"), py::arg("double_quant") = true,
      "bitsandbytes NF4 (blocks of 64 over the flattened array): packed codes, absmax (dequantized when "
      "double-quantized), and the nested codes / offset / nested absmax");
  q.def(
      "dequantize_nf4",
      [](py::array_t<uint8_t, py::array::c_style | py::array::forcecast> packed, FloatArray absmax, int64_t numel) {
        quant::NF4Weight w;
        w.numel = numel;
        w.packed = from_array(packed);
        w.absmax = from_array(absmax);
        py::array_t<float> out{py::ssize_t(numel)};
        quant::dequantize_nf4(w, out.mutable_data());
        return out;
      },
      py::arg("packed"), py::arg("absmax"), py::arg("numel"));
  q.def(
      "quantize_int8_rows",
      [](FloatArray w) {
        FOUNDRY_CHECK_AS(ValueError, w.ndim() == 2, "quantize_int8_rows: expected a 2-D weight, got {} dims", w.ndim());
        const auto q = quant::quantize_int8_rows(w.data(), int64_t(w.shape(0)), int64_t(w.shape(1)));
        py::array_t<int8_t> codes({w.shape(0), w.shape(1)});
        std::memcpy(codes.mutable_data(), q.codes.data(), q.codes.size());
        return py::make_tuple(codes, to_array(q.scales));
      },
      py::arg("w"), "LLM.int8 rows: (int8 codes [rows, cols], float32 SCB [rows])");
  q.def(
      "dequantize_int8_rows",
      [](py::array_t<int8_t, py::array::c_style | py::array::forcecast> codes, FloatArray scales) {
        FOUNDRY_CHECK_AS(ValueError, codes.ndim() == 2, "dequantize_int8_rows: codes must be 2-D");
        quant::Int8RowWeight q;
        q.rows = int64_t(codes.shape(0));
        q.cols = int64_t(codes.shape(1));
        q.codes = from_array(codes);
        q.scales = from_array(scales);
        py::array_t<float> out({codes.shape(0), codes.shape(1)});
        quant::dequantize_int8_rows(q, out.mutable_data());
        return out;
      });
  q.def(
      "quantize_int4_groups",
      [](FloatArray w, int64_t group, bool symmetric) {
        FOUNDRY_CHECK_AS(ValueError, w.ndim() == 2, "quantize_int4_groups: expected a 2-D weight, got {} dims", w.ndim());
        const auto q = quant::quantize_int4_groups(w.data(), int64_t(w.shape(0)), int64_t(w.shape(1)), group, symmetric);
        py::array_t<float> deq({w.shape(0), w.shape(1)});
        quant::dequantize_int4_groups(q, deq.mutable_data());
        return py::make_tuple(to_array(q.packed), to_array(q.scales), to_array(q.zeros), deq);
      },
      py::arg("w"), py::arg("group"), py::arg("symmetric"),
      "int4 groups: (packed uint8, fp16 scale bits, zero points (asymmetric), dequantized float32)");
}

}  // namespace

void bind_quant(py::module_& m) {
  py::module_ q = m.def_submodule("quant", "GGML weight formats (f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, q6_K, q8_K)");
  q.def("formats", [] {
    py::list out;
    for (const auto& t : quant::block_formats())
      out.append(py::make_tuple(t.name, t.ggml_type, t.block_size, t.block_bytes, quant::traits(t.dot_format).name));
    return out;
  }, "(name, ggml_type, block_size, block_bytes, dot_format) of every format");
  q.def(
      "quantize",
      [](py::array_t<float, py::array::c_style | py::array::forcecast> x, const std::string& fmt) {
        const auto& t = quant::traits(fmt);
        const int64_t k = x.ndim() == 0 ? 1 : int64_t(x.shape(x.ndim() - 1));
        const int64_t rows = k == 0 ? 0 : int64_t(x.size()) / k;
        std::string out(size_t(quant::quantized_bytes(t, rows, k)), '\0');
        for (int64_t r = 0; r < rows; ++r)
          t.quantize(x.data() + r * k, out.data() + r * (k / t.block_size) * t.block_bytes, k);
        return py::bytes(out);
      },
      py::arg("x"), py::arg("format"), "rows of the last dimension -> the format's blocks, as llama.cpp writes them");
  q.def(
      "dequantize",
      [](py::bytes data, const std::string& fmt, int64_t k) {
        const auto& t = quant::traits(fmt);
        std::string_view s = data;
        FOUNDRY_CHECK_AS(ValueError, k > 0 && k % t.block_size == 0, "{}: k = {} is not a multiple of {}", t.name, k,
                         t.block_size);
        const int64_t row_bytes = k / t.block_size * t.block_bytes;
        FOUNDRY_CHECK_AS(ValueError, int64_t(s.size()) % row_bytes == 0,
                         "{}: {} bytes are not whole rows of {} values ({} bytes each)", t.name, s.size(), k, row_bytes);
        const int64_t rows = int64_t(s.size()) / row_bytes;
        py::array_t<float> out({rows, k});
        for (int64_t r = 0; r < rows; ++r) t.dequantize(s.data() + r * row_bytes, out.mutable_data() + r * k, k);
        return out;
      },
      py::arg("data"), py::arg("format"), py::arg("k"), "blocks -> float32 [rows, k]");
  q.def(
      "dot",
      [](py::bytes x, py::bytes y, const std::string& fmt, int64_t k) {
        const auto& t = quant::traits(fmt);
        const auto& ty = quant::traits(t.dot_format);
        std::string_view xs = x, ys = y;
        FOUNDRY_CHECK_AS(ValueError, int64_t(xs.size()) == quant::quantized_bytes(t, 1, k),
                         "dot: x holds {} bytes, a {} row of {} needs {}", xs.size(), t.name, k,
                         quant::quantized_bytes(t, 1, k));
        FOUNDRY_CHECK_AS(ValueError, int64_t(ys.size()) == quant::quantized_bytes(ty, 1, k),
                         "dot: y holds {} bytes, a {} row of {} needs {}", ys.size(), ty.name, k,
                         quant::quantized_bytes(ty, 1, k));
        return t.dot(xs.data(), ys.data(), k);
      },
      py::arg("x"), py::arg("y"), py::arg("format"), py::arg("k"),
      "dot of a row in `format` with a row in its dot format (q8_0, q8_K, or its own 16-bit float)");
  bind_weight_only(q);
}

}  // namespace foundry::python
