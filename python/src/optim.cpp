// foundry.optim: the C++ optimizers, learning-rate schedulers and gradient clipping with
// torch.optim's names and keyword arguments. Parameters are the model's own tensors (the same
// objects named_parameters() returns), given as a list or as torch-style param groups
// ([{"params": [...], "lr": ...}, ...]).
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <memory>

#include "convert.h"
#include "foundry/optim/lr_scheduler.h"
#include "foundry/optim/optimizer.h"

namespace py = pybind11;

namespace foundry::python {

namespace {

using optim::Optimizer;
using optim::ParamGroup;

// A list of tensors, or of dicts {"params": [...], option: value}.
std::vector<ParamGroup> groups_from(py::handle params) {
  std::vector<ParamGroup> groups;
  ParamGroup plain;
  for (py::handle item : py::iter(params)) {
    if (py::isinstance<py::dict>(item)) {
      py::dict d = py::reinterpret_borrow<py::dict>(item);
      if (!d.contains("params")) throw py::value_error("optimizer: a param group needs 'params'");
      ParamGroup g;
      for (py::handle p : py::iter(d["params"])) g.params.push_back(p.cast<Tensor>());
      for (auto kv : d) {
        const std::string key = kv.first.cast<std::string>();
        if (key == "params") continue;
        if (key == "betas") {
          auto b = kv.second.cast<std::pair<double, double>>();
          g.options["beta1"] = b.first;
          g.options["beta2"] = b.second;
        } else {
          g.options[key] = kv.second.cast<double>();
        }
      }
      groups.push_back(std::move(g));
    } else {
      plain.params.push_back(item.cast<Tensor>());
    }
  }
  if (!plain.params.empty()) {
    if (!groups.empty()) throw py::value_error("optimizer: mix of tensors and param groups");
    groups.push_back(std::move(plain));
  }
  if (groups.empty()) throw py::value_error("optimizer got an empty parameter list");
  return groups;
}

template <class Opt, class Options>
std::unique_ptr<Opt> make(py::handle params, const Options& o) {
  return std::make_unique<Opt>(groups_from(params), o);
}

void bind_optimizers(py::module_& om) {
  py::class_<Optimizer>(om, "Optimizer")
      .def(
          "step",
          [](Optimizer& o, py::object closure) {
            py::object loss = closure.is_none() ? py::none() : closure();
            {
              py::gil_scoped_release nogil;
              o.step();
            }
            return loss;
          },
          py::arg("closure") = py::none())
      .def("zero_grad", &Optimizer::zero_grad, py::arg("set_to_none") = true)
      .def_property_readonly("param_groups",
                             [](Optimizer& o) {
                               py::list out;
                               for (const ParamGroup& g : o.param_groups()) {
                                 py::dict d;
                                 d["params"] = g.params;
                                 for (const auto& [k, v] : g.options) d[py::str(k)] = v;
                                 out.append(d);
                               }
                               return out;
                             })
      .def("get_lr", &Optimizer::lr, py::arg("group") = 0)
      .def("set_lr", &Optimizer::set_lr, py::arg("lr"), py::arg("group") = 0)
      .def_property_readonly("name", &Optimizer::name);
  py::class_<optim::SGD, Optimizer>(om, "SGD")
      .def(py::init([](py::handle params, double lr, double momentum, double dampening, double weight_decay,
                       bool nesterov, bool maximize) {
             return make<optim::SGD>(params, optim::SGDOptions{lr, momentum, dampening, weight_decay, nesterov, maximize});
           }),
           py::arg("params"), py::arg("lr"), py::arg("momentum") = 0.0, py::arg("dampening") = 0.0,
           py::arg("weight_decay") = 0.0, py::arg("nesterov") = false, py::arg("maximize") = false);
  py::class_<optim::Adam, Optimizer>(om, "Adam")
      .def(py::init([](py::handle params, double lr, std::pair<double, double> betas, double eps, double weight_decay,
                       bool amsgrad, bool maximize) {
             return make<optim::Adam>(params, optim::AdamOptions{lr, betas, eps, weight_decay, amsgrad, maximize});
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::pair<double, double>{0.9, 0.999},
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0, py::arg("amsgrad") = false,
           py::arg("maximize") = false);
  py::class_<optim::AdamW, optim::Adam>(om, "AdamW")
      .def(py::init([](py::handle params, double lr, std::pair<double, double> betas, double eps, double weight_decay,
                       bool amsgrad, bool maximize) {
             return make<optim::AdamW>(params, optim::AdamWOptions{lr, betas, eps, weight_decay, amsgrad, maximize});
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::pair<double, double>{0.9, 0.999},
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 1e-2, py::arg("amsgrad") = false,
           py::arg("maximize") = false);
  py::class_<optim::Lion, Optimizer>(om, "Lion")
      .def(py::init([](py::handle params, double lr, std::pair<double, double> betas, double weight_decay) {
             return make<optim::Lion>(params, optim::LionOptions{lr, betas, weight_decay});
           }),
           py::arg("params"), py::arg("lr") = 1e-4, py::arg("betas") = std::pair<double, double>{0.9, 0.99},
           py::arg("weight_decay") = 0.0);
  py::class_<optim::Adagrad, Optimizer>(om, "Adagrad")
      .def(py::init([](py::handle params, double lr, double lr_decay, double weight_decay,
                       double initial_accumulator_value, double eps) {
             return make<optim::Adagrad>(
                 params, optim::AdagradOptions{lr, lr_decay, weight_decay, initial_accumulator_value, eps});
           }),
           py::arg("params"), py::arg("lr") = 1e-2, py::arg("lr_decay") = 0.0, py::arg("weight_decay") = 0.0,
           py::arg("initial_accumulator_value") = 0.0, py::arg("eps") = 1e-10);
  py::class_<optim::RMSprop, Optimizer>(om, "RMSprop")
      .def(py::init([](py::handle params, double lr, double alpha, double eps, double weight_decay, double momentum,
                       bool centered) {
             return make<optim::RMSprop>(params, optim::RMSpropOptions{lr, alpha, eps, weight_decay, momentum, centered});
           }),
           py::arg("params"), py::arg("lr") = 1e-2, py::arg("alpha") = 0.99, py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 0.0, py::arg("momentum") = 0.0, py::arg("centered") = false);

  auto tensors = [](py::handle params) {
    std::vector<Tensor> out;
    if (py::isinstance<Tensor>(params)) return std::vector<Tensor>{params.cast<Tensor>()};
    for (py::handle p : py::iter(params)) out.push_back(p.cast<Tensor>());
    return out;
  };
  om.def(
      "clip_grad_norm_",
      [tensors](py::handle parameters, double max_norm, double norm_type, bool error_if_nonfinite) {
        return optim::clip_grad_norm_(tensors(parameters), max_norm, norm_type, error_if_nonfinite);
      },
      py::arg("parameters"), py::arg("max_norm"), py::arg("norm_type") = 2.0, py::arg("error_if_nonfinite") = false,
      "torch.nn.utils.clip_grad_norm_: scales the gradients to a joint norm of at most max_norm; returns the norm");
  om.def(
      "clip_grad_value_",
      [tensors](py::handle parameters, double clip_value) { optim::clip_grad_value_(tensors(parameters), clip_value); },
      py::arg("parameters"), py::arg("clip_value"));
}

void bind_schedulers(py::module_& om) {
  py::module_ sm = om.def_submodule("lr_scheduler", "torch.optim.lr_scheduler's schedulers");
  py::class_<optim::LRScheduler>(sm, "LRScheduler")
      .def("step", [](optim::LRScheduler& s) { s.step(); })
      .def("get_last_lr", [](const optim::LRScheduler& s) { return s.last_lrs(); })
      .def_property_readonly("last_epoch", &optim::LRScheduler::last_epoch)
      .def("state_dict", &optim::LRScheduler::state_dict)
      .def("load_state_dict", &optim::LRScheduler::load_state_dict);
  auto keep = py::keep_alive<1, 2>();  // a scheduler keeps its optimizer alive
  py::class_<optim::StepLR, optim::LRScheduler>(sm, "StepLR")
      .def(py::init<Optimizer&, int64_t, double>(), py::arg("optimizer"), py::arg("step_size"), py::arg("gamma") = 0.1,
           keep);
  py::class_<optim::MultiStepLR, optim::LRScheduler>(sm, "MultiStepLR")
      .def(py::init<Optimizer&, std::vector<int64_t>, double>(), py::arg("optimizer"), py::arg("milestones"),
           py::arg("gamma") = 0.1, keep);
  py::class_<optim::ExponentialLR, optim::LRScheduler>(sm, "ExponentialLR")
      .def(py::init<Optimizer&, double>(), py::arg("optimizer"), py::arg("gamma"), keep);
  py::class_<optim::CosineAnnealingLR, optim::LRScheduler>(sm, "CosineAnnealingLR")
      .def(py::init<Optimizer&, int64_t, double>(), py::arg("optimizer"), py::arg("T_max"), py::arg("eta_min") = 0.0,
           keep);
  py::class_<optim::LinearLR, optim::LRScheduler>(sm, "LinearLR")
      .def(py::init<Optimizer&, double, double, int64_t>(), py::arg("optimizer"), py::arg("start_factor") = 1.0 / 3,
           py::arg("end_factor") = 1.0, py::arg("total_iters") = 5, keep);
  py::class_<optim::WarmupCosine, optim::LRScheduler>(sm, "WarmupCosine")
      .def(py::init<Optimizer&, int64_t, int64_t, double>(), py::arg("optimizer"), py::arg("warmup_steps"),
           py::arg("total_steps"), py::arg("min_lr") = 0.0, keep);
  py::class_<optim::LambdaLR, optim::LRScheduler>(sm, "LambdaLR")
      .def(py::init([](Optimizer& o, py::function fn) {
             // The lambda runs when the scheduler steps, called from Python (the GIL is held).
             return std::make_unique<optim::LambdaLR>(o, [fn](int64_t e) { return fn(e).cast<double>(); });
           }),
           py::arg("optimizer"), py::arg("lr_lambda"), keep);
}

}  // namespace

void bind_optim(py::module_& m) {
  py::module_ om = m.def_submodule("optim", "optimizers over foundry tensors (PyTorch 1.13 semantics)");
  bind_optimizers(om);
  bind_schedulers(om);
}

}  // namespace foundry::python
