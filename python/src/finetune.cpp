// foundry.finetune: the `foundry finetune` loop and its data formats from Python.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "foundry/models/pretrained.h"
#include "foundry/train/finetune.h"

namespace py = pybind11;

namespace foundry::python {

void bind_finetune(py::module_& m) {
  py::module_ fm = m.def_submodule("finetune", "LoRA / QLoRA supervised fine-tuning (foundry finetune)");
  fm.def(
      "load_jsonl",
      [](const std::string& path, const std::string& model_dir, int64_t seq_len) {
        const train::SftFormat f = train::sft_format_for(model_dir, models::read_config(model_dir), seq_len);
        std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> out;
        for (auto& e : train::load_sft_jsonl(path, f)) out.emplace_back(std::move(e.input_ids), std::move(e.labels));
        return out;
      },
      py::arg("path"), py::arg("model"), py::arg("seq_len") = 512,
      "(input_ids, labels) of every example of a JSONL file as `foundry finetune` reads it for the model folder");
  fm.def(
      "run",
      [](py::kwargs kwargs) {
        train::FinetuneConfig c;
        auto get = [&](const char* k, auto& field) {
          if (kwargs.contains(k)) field = kwargs[k].cast<std::decay_t<decltype(field)>>();
        };
        get("model", c.model), get("data", c.data), get("out", c.out), get("eval_data", c.eval_data);
        get("eval_fraction", c.eval_fraction), get("lora_r", c.lora_r), get("lora_alpha", c.lora_alpha);
        get("lora_dropout", c.lora_dropout), get("target_modules", c.target_modules), get("use_rslora", c.use_rslora);
        get("quantize", c.quantize), get("lr", c.lr), get("steps", c.steps), get("epochs", c.epochs);
        get("batch_size", c.batch_size), get("grad_accum", c.grad_accum), get("seq_len", c.seq_len);
        get("warmup", c.warmup), get("schedule", c.schedule), get("weight_decay", c.weight_decay);
        get("grad_clip", c.grad_clip), get("precision", c.precision);
        get("gradient_checkpointing", c.gradient_checkpointing), get("seed", c.seed), get("resume", c.resume);
        get("eval_every", c.eval_every), get("checkpoint_every", c.checkpoint_every), get("progress", c.progress);
        get("threads", c.threads);
        int64_t stop_after = 0;
        if (kwargs.contains("stop_after")) stop_after = kwargs["stop_after"].cast<int64_t>();
        train::FinetuneResult r;
        {
          py::gil_scoped_release nogil;
          r = train::finetune(c, [stop_after](int64_t step, double) { return stop_after <= 0 || step < stop_after; });
        }
        py::dict d;
        d["steps"] = r.steps, d["resumed_from"] = r.resumed_from, d["losses"] = r.losses;
        d["first_loss"] = r.first_loss, d["final_loss"] = r.final_loss;
        d["eval_loss_before"] = r.eval_loss_before, d["eval_loss_after"] = r.eval_loss_after;
        d["train_examples"] = r.train_examples, d["eval_examples"] = r.eval_examples;
        d["trainable_parameters"] = r.trainable_parameters, d["total_parameters"] = r.total_parameters;
        d["quantized_layers"] = r.quantized_layers, d["seconds"] = r.seconds;
        return d;
      },
      "runs `foundry finetune` with its options as keyword arguments (model=, data=, out=, lora_r=, ...); "
      "stop_after=N stops after N steps as an interruption would (checkpoints kept, no adapter written)");
}

}  // namespace foundry::python
