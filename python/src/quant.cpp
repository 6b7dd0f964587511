// foundry.quant: GGML block formats (quantize / dequantize / dot) over NumPy float32 arrays
// and bytes, for tests and tools; the traits table is foundry/quant/block_formats.h.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "foundry/core/error.h"
#include "foundry/quant/block_formats.h"

namespace py = pybind11;

namespace foundry::python {

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
}

}  // namespace foundry::python
