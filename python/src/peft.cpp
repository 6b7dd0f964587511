// foundry.peft: LoRA with PEFT's names (docs/finetuning.md). LoraConfig, get_peft_model and
// PeftModel (from_pretrained, save_pretrained, merge_and_unload, set_adapter, disable_adapter, ...)
// over the C++ PeftModel; its parameters are the model's own tensors.
#include <pybind11/stl.h>

#include <memory>

#include "convert.h"
#include "foundry/io/atomic_file.h"
#include "foundry/peft/lora.h"

namespace py = pybind11;

namespace foundry::python {

namespace {

using models::CausalLM;
using peft::LoraConfig;
using peft::PeftModel;

LoraConfig make_config(int64_t r, double lora_alpha, py::object target_modules, double lora_dropout,
                       bool fan_in_fan_out, const std::string& bias, bool use_rslora, py::object modules_to_save,
                       py::object init_lora_weights, py::object layers_to_transform,
                       std::map<std::string, int64_t> rank_pattern, std::map<std::string, double> alpha_pattern,
                       bool use_dora, py::object task_type, bool inference_mode, py::object base_model_name_or_path) {
  LoraConfig c;
  c.r = r;
  c.lora_alpha = lora_alpha;
  c.lora_dropout = lora_dropout;
  c.fan_in_fan_out = fan_in_fan_out;
  c.bias = bias;
  if (bias != "none" && bias != "all" && bias != "lora_only")
    throw py::value_error("LoraConfig: bias must be 'none', 'all' or 'lora_only'");
  c.use_rslora = use_rslora;
  if (py::isinstance<py::str>(target_modules)) {
    std::string s = target_modules.cast<std::string>();
    if (s == "all-linear" || s == "ALL-LINEAR") c.all_linear = true;
    else c.target_modules_regex = s;
  } else if (!target_modules.is_none()) {
    for (py::handle t : py::iter(target_modules)) c.target_modules.push_back(t.cast<std::string>());
  }
  if (!modules_to_save.is_none())
    for (py::handle t : py::iter(modules_to_save)) c.modules_to_save.push_back(t.cast<std::string>());
  if (py::isinstance<py::bool_>(init_lora_weights)) c.init_lora_weights = init_lora_weights.cast<bool>() ? "true" : "false";
  else if (py::isinstance<py::str>(init_lora_weights) && init_lora_weights.cast<std::string>() == "gaussian")
    c.init_lora_weights = "gaussian";
  else
    throw py::value_error("LoraConfig: init_lora_weights must be True, False or 'gaussian'");
  if (py::isinstance<py::int_>(layers_to_transform)) c.layers_to_transform = {layers_to_transform.cast<int64_t>()};
  else if (!layers_to_transform.is_none()) c.layers_to_transform = layers_to_transform.cast<std::vector<int64_t>>();
  c.rank_pattern = std::move(rank_pattern);
  c.alpha_pattern = std::move(alpha_pattern);
  c.use_dora = use_dora;
  c.task_type = task_type.is_none() ? "" : task_type.cast<std::string>();
  c.inference_mode = inference_mode;
  if (!base_model_name_or_path.is_none()) c.base_model_name_or_path = base_model_name_or_path.cast<std::string>();
  return c;
}

py::object target_modules_of(const LoraConfig& c) {
  if (c.target_modules_regex) return py::str(*c.target_modules_regex);
  if (c.all_linear) return py::str("all-linear");
  if (c.target_modules.empty()) return py::none();
  return py::cast(c.target_modules);
}

// peft_model.disable_adapter(): a context manager running the base model alone.
struct DisabledAdapters {
  std::shared_ptr<PeftModel> model;
  bool was = true;
};

}  // namespace

void bind_peft(py::module_& m) {
  py::module_ pm = m.def_submodule("peft", "LoRA adapters with PEFT's names and files (peft 0.11 compatible)");
  py::class_<LoraConfig>(pm, "LoraConfig")
      .def(py::init(&make_config), py::arg("r") = 8, py::arg("lora_alpha") = 8.0, py::arg("target_modules") = py::none(),
           py::arg("lora_dropout") = 0.0, py::arg("fan_in_fan_out") = false, py::arg("bias") = "none",
           py::arg("use_rslora") = false, py::arg("modules_to_save") = py::none(),
           py::arg("init_lora_weights") = true, py::arg("layers_to_transform") = py::none(),
           py::arg("rank_pattern") = std::map<std::string, int64_t>{},
           py::arg("alpha_pattern") = std::map<std::string, double>{}, py::arg("use_dora") = false,
           py::arg("task_type") = "CAUSAL_LM", py::arg("inference_mode") = false,
           py::arg("base_model_name_or_path") = py::none())
      .def_readwrite("r", &LoraConfig::r)
      .def_readwrite("lora_alpha", &LoraConfig::lora_alpha)
      .def_readwrite("lora_dropout", &LoraConfig::lora_dropout)
      .def_readwrite("fan_in_fan_out", &LoraConfig::fan_in_fan_out)
      .def_readwrite("bias", &LoraConfig::bias)
      .def_readwrite("use_rslora", &LoraConfig::use_rslora)
      .def_readwrite("modules_to_save", &LoraConfig::modules_to_save)
      .def_readwrite("inference_mode", &LoraConfig::inference_mode)
      .def_readwrite("task_type", &LoraConfig::task_type)
      .def_property_readonly("target_modules", &target_modules_of)
      .def_property_readonly("peft_type", [](const LoraConfig&) { return "LORA"; })
      .def("to_json_string", &LoraConfig::to_json)
      .def("to_dict", [](const LoraConfig& c) { return py::module_::import("json").attr("loads")(c.to_json()); })
      .def_static("from_pretrained",
                  [](const std::string& dir) {
                    const std::string path = dir + "/adapter_config.json";
                    return LoraConfig::from_json(io::read_file(path), path);
                  },
                  py::arg("pretrained_model_name_or_path"))
      .def("__repr__", [](const LoraConfig& c) { return "LoraConfig(" + c.to_json() + ")"; });

  py::class_<DisabledAdapters>(pm, "_DisabledAdapters")
      .def("__enter__",
           [](DisabledAdapters& d) {
             d.was = d.model->adapters_enabled();
             d.model->set_adapters_enabled(false);
           })
      .def("__exit__", [](DisabledAdapters& d, py::args) { d.model->set_adapters_enabled(d.was); });

  py::class_<PeftModel, std::shared_ptr<PeftModel>>(pm, "PeftModel")
      .def(py::init([](std::shared_ptr<CausalLM> model, const LoraConfig& config, const std::string& adapter_name) {
             return std::make_shared<PeftModel>(model, config, adapter_name);
           }),
           py::arg("model"), py::arg("peft_config"), py::arg("adapter_name") = "default")
      .def_static(
          "from_pretrained",
          [](std::shared_ptr<CausalLM> model, const std::string& model_id, const std::string& adapter_name,
             bool is_trainable) {
            py::gil_scoped_release nogil;
            return PeftModel::from_pretrained(model, model_id, adapter_name, is_trainable);
          },
          py::arg("model"), py::arg("model_id"), py::arg("adapter_name") = "default", py::arg("is_trainable") = false)
      .def(
          "__call__",
          [](PeftModel& m, py::object input_ids, py::object attention_mask, py::object labels) {
            Tensor ids = batch_of(input_ids), mask = batch_of(attention_mask), lab = batch_of(labels);
            py::gil_scoped_release nogil;
            return m(ids, mask, lab);
          },
          py::arg("input_ids"), py::arg("attention_mask") = py::none(), py::arg("labels") = py::none())
      .def("forward",
           [](py::object self, py::object input_ids, py::object attention_mask, py::object labels) {
             return self(input_ids, attention_mask, labels);
           },
           py::arg("input_ids"), py::arg("attention_mask") = py::none(), py::arg("labels") = py::none())
      .def("parameters", [](const PeftModel& m) { return m.parameters(); })
      .def("named_parameters", [](const PeftModel& m) { return m.named_parameters(); },
           "(name, tensor) with PEFT's names: base_model.model.<path>[.base_layer|.lora_A.<adapter>].weight")
      .def("state_dict", [](const PeftModel& m) { return state_dict_of(m); })
      .def("train", [](py::object self, bool mode) { self.cast<PeftModel&>().train(mode); return self; },
           py::arg("mode") = true)
      .def("eval", [](py::object self) { self.cast<PeftModel&>().eval(); return self; })
      .def_property_readonly("training", [](const PeftModel& m) { return m.is_training(); })
      .def("zero_grad", [](PeftModel& m, bool set_to_none) { m.zero_grad(set_to_none); }, py::arg("set_to_none") = true)
      .def("save_pretrained", [](const PeftModel& m, const std::string& dir) { m.save_pretrained(dir); },
           py::arg("save_directory"))
      .def("merge_and_unload", [](PeftModel& m) { return m.merge_and_unload(); },
           "merges the active adapter into the base weights and returns the plain model")
      .def("unload", [](PeftModel& m) { return m.unload(); })
      .def("merge_adapter", &PeftModel::merge_adapter)
      .def("unmerge_adapter", &PeftModel::unmerge_adapter)
      .def("set_adapter", &PeftModel::set_adapter, py::arg("adapter_name"))
      .def("add_adapter", &PeftModel::add_adapter, py::arg("adapter_name"), py::arg("peft_config"))
      .def("load_adapter", &PeftModel::load_adapter, py::arg("model_id"), py::arg("adapter_name"),
           py::arg("is_trainable") = false)
      .def("delete_adapter", &PeftModel::delete_adapter, py::arg("adapter_name"))
      .def_property_readonly("active_adapter", &PeftModel::active_adapter)
      .def_property_readonly("peft_config",
                             [](const PeftModel& m) {
                               py::dict d;
                               for (const std::string& n : m.adapter_names()) d[py::str(n)] = m.peft_config(n);
                               return d;
                             })
      .def("enable_adapter_layers", [](PeftModel& m) { m.set_adapters_enabled(true); })
      .def("disable_adapter_layers", [](PeftModel& m) { m.set_adapters_enabled(false); })
      .def("disable_adapter", [](std::shared_ptr<PeftModel> m) { return DisabledAdapters{m}; },
           "context manager: the base model alone inside the with-block")
      .def("get_nb_trainable_parameters", &PeftModel::trainable_parameters)
      .def("print_trainable_parameters",
           [](const PeftModel& m) {
             auto [trainable, all] = m.trainable_parameters();
             py::print(py::str("trainable params: {:,} || all params: {:,} || trainable%: {:.4f}")
                           .format(trainable, all, 100.0 * double(trainable) / double(std::max<int64_t>(all, 1))));
           })
      .def("get_base_model", [](const PeftModel& m) { return m.base_model_ptr(); })
      .def_property_readonly("base_model",
                             [](const PeftModel& m) {
                               return py::module_::import("types").attr("SimpleNamespace")(
                                   py::arg("model") = m.base_model_ptr());
                             })
      .def("generate",
           [](const PeftModel& m, py::args args, py::kwargs kwargs) {
             return py::cast(m.base_model_ptr()).attr("generate")(*args, **kwargs);
           })
      .def("__repr__", [](const PeftModel& m) { return m.str(); });

  pm.def(
      "quantize_base",
      [](std::shared_ptr<CausalLM> model, const std::string& format) {
        py::gil_scoped_release nogil;
        return peft::quantize_base(*model, format);
      },
      py::arg("model"), py::arg("format") = "nf4",
      "QLoRA: every projection but the LM head computes from `format` bytes (nf4: bitsandbytes' NF4 with "
      "double quantization; int8: LLM.int8 row codes; or a GGML block format) and drops its float weight; "
      "returns how many were quantized");
  pm.def(
      "get_peft_model",
      [](std::shared_ptr<CausalLM> model, const LoraConfig& config, const std::string& adapter_name) {
        return std::make_shared<PeftModel>(model, config, adapter_name);
      },
      py::arg("model"), py::arg("peft_config"), py::arg("adapter_name") = "default",
      "wraps the model's targeted projections with a fresh LoRA adapter (the model is changed in place)");
}

}  // namespace foundry::python
