// foundry.models: pretrained Hugging Face models (docs/models.md). from_pretrained(dir) returns a
// model whose call gives float32 logits and whose generate() takes HF's generation options.
#include <pybind11/stl.h>

#include <memory>

#include "convert.h"
#include "foundry/models/generate.h"
#include "foundry/models/pretrained.h"

namespace py = pybind11;

namespace foundry::python {

namespace {

using models::CausalLM;

std::vector<std::vector<int64_t>> prompts_from(py::handle obj) {
  if (py::isinstance<Tensor>(obj)) {
    Tensor t = obj.cast<Tensor>();
    if (t.dim() == 1) t = t.unsqueeze(0);
    if (t.dim() != 2) throw py::value_error("generate: input_ids must be 1-D or 2-D");
    std::vector<int64_t> flat = t.to(DType::Int64).contiguous().to_vector<int64_t>();
    std::vector<std::vector<int64_t>> out;
    for (int64_t r = 0; r < t.size(0); ++r)
      out.emplace_back(flat.begin() + r * t.size(1), flat.begin() + (r + 1) * t.size(1));
    return out;
  }
  py::list l = py::list(py::reinterpret_borrow<py::object>(obj));
  if (l.size() > 0 && py::isinstance<py::int_>(l[0])) return {l.cast<std::vector<int64_t>>()};
  return l.cast<std::vector<std::vector<int64_t>>>();
}

}  // namespace

void bind_models(py::module_& m) {
  py::module_ mm = m.def_submodule("models", "pretrained Hugging Face models: from_pretrained(dir)");
  py::class_<CausalLM, std::shared_ptr<CausalLM>>(mm, "PretrainedModel")
      .def(
          "__call__",
          [](CausalLM& model, py::object input_ids, py::object attention_mask) {
            Tensor ids = tensor_from(input_ids, DType::Int64);
            if (ids.dim() == 1) ids = ids.unsqueeze(0);
            Tensor mask = attention_mask.is_none() ? Tensor() : tensor_from(attention_mask, DType::Int64);
            if (mask.defined() && mask.dim() == 1) mask = mask.unsqueeze(0);
            py::gil_scoped_release nogil;
            return model.forward(ids, mask);
          },
          py::arg("input_ids"), py::arg("attention_mask") = py::none(),
          "float32 logits [batch, seq, vocab] (left padding: give the attention mask)")
      .def(
          "generate",
          [](CausalLM& model, py::object input_ids, int64_t max_new_tokens, bool do_sample, double temperature,
             int64_t top_k, double top_p, double min_p, double typical_p, double repetition_penalty,
             double presence_penalty, double frequency_penalty, int64_t no_repeat_ngram_size, int64_t num_beams,
             double length_penalty, py::object early_stopping, int64_t num_return_sequences, py::object eos_token_id,
             std::optional<int64_t> pad_token_id, bool ignore_eos, uint64_t seed, std::shared_ptr<CausalLM> draft_model,
             int64_t lookahead) {
            models::GenerationConfig g;
            g.max_new_tokens = max_new_tokens;
            g.do_sample = do_sample;
            g.temperature = temperature;
            g.top_k = top_k;
            g.top_p = top_p;
            g.min_p = min_p;
            g.typical_p = typical_p;
            g.repetition_penalty = repetition_penalty;
            g.presence_penalty = presence_penalty;
            g.frequency_penalty = frequency_penalty;
            g.no_repeat_ngram_size = no_repeat_ngram_size;
            g.num_beams = num_beams;
            g.length_penalty = length_penalty;
            if (py::isinstance<py::str>(early_stopping)) {
              if (early_stopping.cast<std::string>() != "never")
                throw py::value_error("generate: early_stopping must be True, False or 'never'");
              g.early_stopping = 2;
            } else {
              g.early_stopping = early_stopping.cast<bool>() ? 1 : 0;
            }
            g.num_return_sequences = num_return_sequences;
            if (!eos_token_id.is_none())
              g.eos_token_ids = py::isinstance<py::int_>(eos_token_id)
                                    ? std::vector<int64_t>{eos_token_id.cast<int64_t>()}
                                    : eos_token_id.cast<std::vector<int64_t>>();
            g.pad_token_id = pad_token_id;
            g.ignore_eos = ignore_eos;
            g.seed = seed;
            std::vector<std::vector<int64_t>> prompts = prompts_from(input_ids);
            py::gil_scoped_release nogil;
            if (draft_model) {
              if (prompts.size() != 1) throw std::invalid_argument("generate: speculative decoding takes one prompt");
              return models::generate_speculative(model, *draft_model, prompts[0], g, lookahead).tokens;
            }
            return models::generate(model, prompts, g).tokens;
          },
          py::arg("input_ids"), py::arg("max_new_tokens") = 32, py::arg("do_sample") = false,
          py::arg("temperature") = 1.0, py::arg("top_k") = 0, py::arg("top_p") = 1.0, py::arg("min_p") = 0.0,
          py::arg("typical_p") = 1.0, py::arg("repetition_penalty") = 1.0, py::arg("presence_penalty") = 0.0,
          py::arg("frequency_penalty") = 0.0, py::arg("no_repeat_ngram_size") = 0, py::arg("num_beams") = 1,
          py::arg("length_penalty") = 1.0, py::arg("early_stopping") = false, py::arg("num_return_sequences") = 1,
          py::arg("eos_token_id") = py::none(), py::arg("pad_token_id") = py::none(), py::arg("ignore_eos") = false,
          py::arg("seed") = 0, py::arg("draft_model") = nullptr, py::arg("lookahead") = 4,
          "new token ids per prompt (per returned beam with num_beams > 1), HF's options")
      .def_property_readonly("architecture", [](const CausalLM& m) { return m.config().architecture; })
      .def_property_readonly("vocab_size", [](const CausalLM& m) { return m.config().vocab_size; })
      .def_property_readonly("config_json", [](const CausalLM& m) { return m.config().json; })
      .def("num_parameters", &CausalLM::num_parameters)
      .def("state_dict", [](const CausalLM& m) { return m.weights(); }, "weights by HF name")
      .def("__repr__", [](const CausalLM& m) {
        return "PretrainedModel(" + m.config().architecture + ", " + std::to_string(m.num_parameters()) + " parameters)";
      });
  mm.def(
      "from_pretrained",
      [](const std::string& path, py::object dtype, const std::string& quantize, const std::string& kv_cache,
         const std::string& quantized_prefill) -> std::shared_ptr<CausalLM> {
        models::LoadOptions o;
        if (!dtype.is_none()) o.dtype = dtype_from(dtype);
        o.quantize = quantize;
        o.kv_cache = kv_cache;
        o.quantized_prefill = quantized_prefill;
        py::gil_scoped_release nogil;
        return models::load_pretrained(path, o);
      },
      py::arg("path"), py::arg("dtype") = py::none(), py::arg("quantize") = "", py::arg("kv_cache") = "",
      py::arg("quantized_prefill") = "auto",
      "loads a Hugging Face model folder, GGUF file or `foundry quantize` folder; quantize='q8_0' (any format of "
      "foundry.quant.formats()) computes with quantized weights; kv_cache='f16' / 'bf16' / 'q8_0' stores the "
      "KV cache in that format; quantized_prefill='float32' / 'bfloat16' / 'auto' picks the prefill GEMM's "
      "precision with quantized weights");
  mm.def("supported_architectures", &models::supported_architectures);
}

}  // namespace foundry::python
