// foundry.models: Hugging Face models (docs/models.md). from_pretrained(dir) returns the model's
// module tree: calling it gives the logits (and HF's loss with labels=), it trains with autograd
// (parameters(), named_parameters(), state_dict(), train() / eval(), requires_grad_(), gradient
// checkpointing), and generate() takes HF's generation options. foundry.optim holds the
// optimizers and foundry.autocast the bfloat16 autocast context.
#include <pybind11/stl.h>

#include <memory>

#include "convert.h"
#include "foundry/models/chat_template.h"
#include "foundry/models/encoder.h"
#include "foundry/models/generate.h"
#include "foundry/models/pretrained.h"
#include "foundry/models/seq2seq.h"
#include "foundry/ops/autocast.h"

namespace py = pybind11;

namespace foundry::python {

namespace {

using models::CausalLM;

py::object optional_tensor(const Tensor& t) { return t.defined() ? py::cast(t) : py::none(); }

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

void bind_autocast(py::module_& m) {
  struct Autocast {
    bool enabled;
    DType dtype;
    std::unique_ptr<autocast::AutocastGuard> guard;
  };
  py::class_<Autocast>(m, "autocast", "bfloat16 autocast for matrix products (torch.autocast('cpu') semantics)")
      .def(py::init([](py::object dtype, bool enabled) {
             return Autocast{enabled, dtype.is_none() ? DType::BFloat16 : dtype_from(dtype), nullptr};
           }),
           py::arg("dtype") = py::none(), py::arg("enabled") = true)
      .def("__enter__", [](Autocast& a) { a.guard = std::make_unique<autocast::AutocastGuard>(a.enabled, a.dtype); })
      .def("__exit__", [](Autocast& a, py::args) { a.guard.reset(); });
}

}  // namespace

void bind_optim(py::module_& m);

void bind_models(py::module_& m) {
  bind_optim(m);
  bind_autocast(m);
  py::module_ mm = m.def_submodule("models", "Hugging Face models: from_pretrained(dir), create(config)");
  py::class_<models::CausalLMOutput>(mm, "CausalLMOutput", "HF's output: loss (with labels) and logits")
      .def_readonly("loss", &models::CausalLMOutput::loss)
      .def_readonly("logits", &models::CausalLMOutput::logits)
      .def("__len__", [](const models::CausalLMOutput& o) { return o.loss.defined() ? 2 : 1; })
      .def("__getitem__",
           [](const models::CausalLMOutput& o, int64_t i) {
             std::vector<Tensor> items;
             if (o.loss.defined()) items.push_back(o.loss);
             items.push_back(o.logits);
             if (i < 0) i += int64_t(items.size());
             if (i < 0 || i >= int64_t(items.size())) throw py::index_error("CausalLMOutput index out of range");
             return items[size_t(i)];
           })
      // Tensor attributes reach the logits, so model(ids).numpy() reads as before (numpy() of the
      // values, detached, as the output is no tensor of a graph itself).
      .def("numpy", [](const models::CausalLMOutput& o) { return py::cast(o.logits.detach()).attr("numpy")(); })
      .def("__getattr__", [](py::object self, const std::string& name) {
        return py::getattr(self.attr("logits"), name.c_str());
      });
  py::class_<CausalLM, std::shared_ptr<CausalLM>>(mm, "PretrainedModel")
      .def(
          "__call__",
          [](CausalLM& model, py::object input_ids, py::object attention_mask, py::object labels) {
            Tensor ids = batch_of(input_ids), mask = batch_of(attention_mask), lab = batch_of(labels);
            py::gil_scoped_release nogil;
            return model(ids, mask, lab);
          },
          py::arg("input_ids"), py::arg("attention_mask") = py::none(), py::arg("labels") = py::none(),
          "CausalLMOutput: float32 logits [batch, seq, vocab] and, with labels (-100 ignored), HF's shifted "
          "next-token cross-entropy as loss (left padding: give the attention mask)")
      .def("parameters", [](const CausalLM& m) { return m.parameters(); })
      .def_property_readonly("weight_quantization", &CausalLM::weight_quantization,
                             "the format the weight products read copies in ('' dense; 'bf16' for a packed bf16 model)")
      .def("named_parameters", [](const CausalLM& m) { return m.named_parameters(); },
           "(name, tensor) with transformers' names, tied tensors once")
      .def("state_dict", [](const CausalLM& m) { return dict_of(m.state_dict()); },
           "every parameter by its transformers name (tied ones under each name); weights held quantized "
           "(a GGUF file's) dequantized")
      .def("load_state_dict",
           [](CausalLM& m, py::dict state, bool strict) {
             nn::NamedTensors s;
             for (auto item : state) s.emplace_back(item.first.cast<std::string>(), tensor_from(item.second, std::nullopt));
             auto r = m.load_state_dict(s, strict);
             return py::make_tuple(r.missing_keys, r.unexpected_keys);
           },
           py::arg("state_dict"), py::arg("strict") = true)
      .def("train", [](py::object self, bool mode) { self.cast<CausalLM&>().train(mode); return self; },
           py::arg("mode") = true)
      .def("eval", [](py::object self) { self.cast<CausalLM&>().eval(); return self; })
      .def_property_readonly("training", [](const CausalLM& m) { return m.is_training(); })
      .def("requires_grad_",
           [](py::object self, bool on) {
             for (Tensor& p : self.cast<CausalLM&>().parameters()) p.requires_grad_(on);
             return self;
           },
           py::arg("requires_grad") = true)
      .def("zero_grad", [](CausalLM& m, bool set_to_none) { m.zero_grad(set_to_none); }, py::arg("set_to_none") = true)
      .def("gradient_checkpointing_enable", [](CausalLM& m) { m.set_gradient_checkpointing(true); })
      .def("gradient_checkpointing_disable", [](CausalLM& m) { m.set_gradient_checkpointing(false); })
      .def_property_readonly("is_gradient_checkpointing", &CausalLM::gradient_checkpointing)
      .def("save_pretrained", [](const CausalLM& m, const std::string& dir) { models::save_pretrained(m, dir); },
           py::arg("save_directory"))
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
      .def("num_parameters", [](const CausalLM& m) { return m.num_parameters(); })
      .def("__repr__", [](const CausalLM& m) {
        return "PretrainedModel(" + m.config().architecture + ", " + std::to_string(m.num_parameters()) + " parameters)";
      });
  using models::Seq2SeqLM;
  py::class_<models::Seq2SeqOutput>(mm, "Seq2SeqOutput",
                                    "transformers' Seq2SeqLMOutput: loss (with labels), logits, encoder_last_hidden_state")
      .def_property_readonly("loss", [](const models::Seq2SeqOutput& o) { return optional_tensor(o.loss); })
      .def_readonly("logits", &models::Seq2SeqOutput::logits)
      .def_readonly("encoder_last_hidden_state", &models::Seq2SeqOutput::encoder_last_hidden_state);
  py::class_<Seq2SeqLM, CausalLM, std::shared_ptr<Seq2SeqLM>>(mm, "Seq2SeqModel")
      .def(
          "__call__",
          [](Seq2SeqLM& model, py::object input_ids, py::object attention_mask, py::object decoder_input_ids,
             py::object labels) {
            Tensor ids = batch_of(input_ids), mask = batch_of(attention_mask), dec = batch_of(decoder_input_ids),
                   lab = batch_of(labels);
            py::gil_scoped_release nogil;
            return model.seq2seq(ids, mask, dec, lab);
          },
          py::arg("input_ids"), py::arg("attention_mask") = py::none(), py::arg("decoder_input_ids") = py::none(),
          py::arg("labels") = py::none(),
          "Seq2SeqOutput; without decoder_input_ids they are the labels shifted right (decoder_start_token_id first)")
      .def_property_readonly("decoder_start_token_id", &Seq2SeqLM::decoder_start_token_id);
  using models::EncoderModel;
  py::class_<models::EncoderOutput>(mm, "EncoderOutput",
                                    "transformers' encoder output: loss (with labels), logits (the head's), "
                                    "last_hidden_state, pooler_output (None where the model has none)")
      .def_property_readonly("loss", [](const models::EncoderOutput& o) { return optional_tensor(o.loss); })
      .def_property_readonly("logits", [](const models::EncoderOutput& o) { return optional_tensor(o.logits); })
      .def_property_readonly("last_hidden_state", [](const models::EncoderOutput& o) { return o.last_hidden_state; })
      .def_property_readonly("pooler_output", [](const models::EncoderOutput& o) { return optional_tensor(o.pooler_output); });
  py::class_<EncoderModel, std::shared_ptr<EncoderModel>>(mm, "EncoderModel")
      .def(
          "__call__",
          [](EncoderModel& model, py::object input_ids, py::object attention_mask, py::object token_type_ids,
             py::object labels) {
            Tensor ids = batch_of(input_ids), mask = batch_of(attention_mask), types = batch_of(token_type_ids),
                   lab = batch_of(labels);
            py::gil_scoped_release nogil;
            return model(ids, mask, types, lab);
          },
          py::arg("input_ids"), py::arg("attention_mask") = py::none(), py::arg("token_type_ids") = py::none(),
          py::arg("labels") = py::none(), "EncoderOutput; with labels (-100 ignored) the head's loss, as transformers")
      .def("parameters", [](const EncoderModel& m) { return m.parameters(); })
      .def("named_parameters", [](const EncoderModel& m) { return m.named_parameters(); },
           "(name, tensor) with transformers' names, tied tensors once")
      .def("state_dict", [](const EncoderModel& m) { return state_dict_of(m); })
      .def("train", [](py::object self, bool mode) { self.cast<EncoderModel&>().train(mode); return self; },
           py::arg("mode") = true)
      .def("eval", [](py::object self) { self.cast<EncoderModel&>().eval(); return self; })
      .def_property_readonly("training", [](const EncoderModel& m) { return m.is_training(); })
      .def("zero_grad", [](EncoderModel& m, bool set_to_none) { m.zero_grad(set_to_none); }, py::arg("set_to_none") = true)
      .def("save_pretrained", [](const EncoderModel& m, const std::string& dir) { models::save_pretrained(m, dir); },
           py::arg("save_directory"))
      .def_property_readonly("architecture", [](const EncoderModel& m) { return m.config().architecture; })
      .def_property_readonly("head", &EncoderModel::head)
      .def_property_readonly("config_json", [](const EncoderModel& m) { return m.config().json; })
      .def("num_parameters", [](const EncoderModel& m) { return m.num_parameters(); })
      .def("__repr__", [](const EncoderModel& m) {
        return "EncoderModel(" + m.config().architecture + ", " + std::to_string(m.num_parameters()) + " parameters)";
      });
  mm.def(
      "from_pretrained",
      [](const std::string& path, py::object dtype, const std::string& quantize, const std::string& kv_cache,
         const std::string& quantized_prefill, bool pack_bf16) -> py::object {
        if (models::is_encoder_folder(path)) {
          std::shared_ptr<EncoderModel> enc;
          {
            py::gil_scoped_release nogil;
            enc = models::load_encoder(path);
          }
          return py::cast(enc);
        }
        models::LoadOptions o;
        if (!dtype.is_none()) o.dtype = dtype_from(dtype);
        o.quantize = quantize;
        o.kv_cache = kv_cache;
        o.quantized_prefill = quantized_prefill;
        o.pack_bf16 = pack_bf16;
        std::shared_ptr<CausalLM> model;
        {
          py::gil_scoped_release nogil;
          model = models::load_pretrained(path, o);
        }
        if (auto s2s = std::dynamic_pointer_cast<Seq2SeqLM>(model)) return py::cast(s2s);
        return py::cast(model);
      },
      py::arg("path"), py::arg("dtype") = py::none(), py::arg("quantize") = "", py::arg("kv_cache") = "",
      py::arg("quantized_prefill") = "auto", py::arg("pack_bf16") = false,
      "loads a Hugging Face model folder, GGUF file or `foundry quantize` folder; quantize='q8_0' (any format of "
      "foundry.quant.formats()) computes with quantized weights; kv_cache='f16' / 'bf16' / 'q8_0' stores the "
      "KV cache in that format; quantized_prefill='integer' / 'float32' / 'bfloat16' / 'auto' picks the "
      "prefill math with quantized weights (integer: decode's numbers, where the CPU has a kernel); "
      "pack_bf16=True (inference) packs a bf16 checkpoint computed in bf16 without loss, ~12.4 bits a weight");
  mm.def("supported_architectures", &models::supported_architectures);
  py::class_<models::ChatTemplate>(mm, "ChatTemplate",
                                   "a Hugging Face chat template (Jinja), rendered as apply_chat_template does")
      .def(py::init<const std::string&>(), py::arg("source"))
      .def(
          "render",
          [](const models::ChatTemplate& t, py::kwargs context) {
            return t.render(py::module_::import("json").attr("dumps")(context).cast<std::string>());
          },
          "renders with the keyword arguments as variables (messages=[...], bos_token=..., ...)")
      .def(
          "apply",
          [](const models::ChatTemplate& t, py::object messages, bool add_generation_prompt, const std::string& bos,
             const std::string& eos) {
            return t.apply(py::module_::import("json").attr("dumps")(messages).cast<std::string>(),
                           add_generation_prompt, bos, eos);
          },
          py::arg("messages"), py::arg("add_generation_prompt") = false, py::arg("bos_token") = "",
          py::arg("eos_token") = "");
  mm.def(
      "create",
      [](py::object config) -> py::object {
        std::string text = py::isinstance<py::str>(config) ? config.cast<std::string>()
                                                           : py::module_::import("json").attr("dumps")(config).cast<std::string>();
        auto j = py::module_::import("json").attr("loads")(text);
        std::string name = j.contains("architectures") ? py::str(j["architectures"][py::int_(0)]).cast<std::string>()
                           : j.contains("model_type") ? py::str(j["model_type"]).cast<std::string>() : "";
        if (models::is_encoder_architecture(name)) return py::cast(std::shared_ptr<EncoderModel>(models::create_encoder(text)));
        std::shared_ptr<CausalLM> model = models::create_model(text);
        if (auto s2s = std::dynamic_pointer_cast<Seq2SeqLM>(model)) return py::cast(s2s);
        return py::cast(model);
      },
      py::arg("config"),
      "a fresh model from a config.json object (dict or JSON text; 'model_type' or 'architectures' names it), "
      "initialised as transformers does, in training mode");
}

}  // namespace foundry::python
