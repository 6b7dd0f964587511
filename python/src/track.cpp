// foundry._C._track: the C++ tracker (runs, the SQLite store, exports) under the pure-Python
// foundry.track module (python/foundry/track.py), which adds wandb's calling conventions.
#include <pybind11/stl.h>

#include "foundry/core/tensor.h"
#include "foundry/track/tools.h"
#include "foundry/track/track.h"

namespace py = pybind11;

namespace foundry::python {

void bind_track(py::module_& m) {
  py::module_ t = m.def_submodule("_track", "experiment tracking (use foundry.track)");
  using track::Run;
  py::class_<Run, std::unique_ptr<Run>>(t, "Run")
      .def_property_readonly("id", &Run::id)
      .def_property_readonly("name", &Run::name)
      .def_property_readonly("project", &Run::project)
      .def_property_readonly("dir", &Run::dir)
      .def("log", &Run::log, py::arg("values"), py::arg("step") = py::none())
      .def("log_histogram_tensor",
           py::overload_cast<const std::string&, const Tensor&, std::optional<int64_t>, int>(&Run::log_histogram),
           py::arg("key"), py::arg("values"), py::arg("step") = py::none(), py::arg("bins") = 64)
      .def("log_histogram_values",
           [](Run& r, const std::string& key, py::buffer values, std::optional<int64_t> step, int bins) {
             py::buffer_info b = values.request();
             if (b.format != py::format_descriptor<float>::format() || b.itemsize != 4)
               throw py::type_error("log_histogram: expected float32 values");
             const float* p = static_cast<const float*>(b.ptr);
             r.log_histogram(key, std::vector<float>(p, p + b.size), step, bins);
           },
           py::arg("key"), py::arg("values"), py::arg("step") = py::none(), py::arg("bins") = 64)
      .def("log_text", &Run::log_text, py::arg("key"), py::arg("text"), py::arg("step") = py::none())
      .def("log_image_png",
           [](Run& r, const std::string& key, py::bytes png, std::optional<int64_t> step) {
             r.log_image_png(key, std::string(png), step);
           },
           py::arg("key"), py::arg("png"), py::arg("step") = py::none())
      .def("log_image_pixels",
           [](Run& r, const std::string& key, py::bytes pixels, int64_t h, int64_t w, int c, std::optional<int64_t> step) {
             std::string px(pixels);
             if (int64_t(px.size()) != h * w * c)
               throw py::value_error("log_image: pixel buffer size does not match height x width x channels");
             r.log_image(key, reinterpret_cast<const uint8_t*>(px.data()), h, w, c, step);
           },
           py::arg("key"), py::arg("pixels"), py::arg("height"), py::arg("width"), py::arg("channels"),
           py::arg("step") = py::none())
      .def("set_summary", py::overload_cast<const std::string&, const std::string&>(&Run::set_summary))
      .def("summary_json", &Run::summary_json)
      .def("log_artifact", &Run::log_artifact, py::arg("path"), py::arg("type") = "file", py::arg("name") = "")
      .def("add_tokens", &Run::add_tokens)
      .def("flush", &Run::flush, py::call_guard<py::gil_scoped_release>())
      .def("finish", &Run::finish, py::arg("exit_code") = 0, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("finished", &Run::finished);

  t.def(
      "init",
      [](const std::string& project, const std::string& name, const std::string& config_json,
         const std::vector<std::string>& tags, const std::string& dir, const std::string& resume, const std::string& notes,
         double flush_interval, double system_interval, bool tensorboard) {
        track::InitOptions o;
        o.project = project;
        o.name = name;
        o.config_json = config_json;
        o.tags = tags;
        o.dir = dir;
        o.resume = resume;
        o.notes = notes;
        o.flush_interval = flush_interval;
        o.system_interval = system_interval;
        o.tensorboard = tensorboard;
        return track::init(o);
      },
      py::arg("project"), py::arg("name"), py::arg("config_json"), py::arg("tags"), py::arg("dir"), py::arg("resume"),
      py::arg("notes"), py::arg("flush_interval"), py::arg("system_interval"), py::arg("tensorboard"));

  // Reading a tracking directory (JSON text; foundry.track.Api parses it).
  t.def("runs_json", [](const std::string& dir) {
    track::Store s = track::Store::open(dir, false);
    std::string out = "[";
    for (auto& r : s.runs()) out += (out.size() > 1 ? "," : "") + track::run_json(s, r, false);
    return out + "]";
  });
  t.def("run_json", [](const std::string& dir, const std::string& run) {
    track::Store s = track::Store::open(dir, false);
    return track::run_json(s, s.run(run), true);
  });
  t.def("scalars", [](const std::string& dir, const std::string& run, const std::string& key) {
    track::Store s = track::Store::open(dir, false);
    std::vector<std::tuple<int64_t, double, double>> out;
    for (auto& p : s.scalars(s.run(run).id, key)) out.emplace_back(p.step, p.wall_time, p.value);
    return out;
  });
  t.def("texts", [](const std::string& dir, const std::string& run, const std::string& key) {
    track::Store s = track::Store::open(dir, false);
    std::vector<std::tuple<int64_t, double, std::string>> out;
    for (auto& p : s.texts(s.run(run).id, key)) out.emplace_back(p.step, p.wall_time, p.text);
    return out;
  });
  t.def("histograms", [](const std::string& dir, const std::string& run, const std::string& key) {
    track::Store s = track::Store::open(dir, false);
    py::list out;
    for (auto& p : s.histograms(s.run(run).id, key)) {
      py::dict d;
      d["step"] = p.step;
      d["wall_time"] = p.wall_time;
      d["min"] = p.histogram.min;
      d["max"] = p.histogram.max;
      d["num"] = p.histogram.num;
      d["sum"] = p.histogram.sum;
      d["sum_squares"] = p.histogram.sum_squares;
      d["bucket_limits"] = p.histogram.bucket_limits;
      d["bucket_counts"] = p.histogram.bucket_counts;
      out.append(d);
    }
    return out;
  });
  t.def("export", [](const std::string& dir, const std::string& run, const std::string& format, const std::string& out) {
    track::Store s = track::Store::open(dir, false);
    return track::export_run(s, s.run(run), format, out);
  });
}

}  // namespace foundry::python
