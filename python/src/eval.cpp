// foundry._C._eval: the C++ metrics (foundry/eval/metrics.h) under the pure-Python foundry.eval
// module (python/foundry/eval.py), which adds the libraries' calling conventions.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "foundry/eval/forensics.h"
#include "foundry/eval/metrics.h"

namespace py = pybind11;

namespace foundry::python {

void bind_eval(py::module_& m) {
  py::module_ e = m.def_submodule("_eval", "evaluation metrics (use foundry.eval)");
  e.def("corpus_bleu", [](const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs) {
    eval::BleuScore s;
    {
      py::gil_scoped_release release;
      s = eval::bleu(hyps, refs);
    }
    py::dict d;
    d["score"] = s.score;
    d["counts"] = s.counts;
    d["totals"] = s.totals;
    d["precisions"] = s.precisions;
    d["bp"] = s.bp;
    d["sys_len"] = s.sys_len;
    d["ref_len"] = s.ref_len;
    return d;
  });
  e.def("tokenize_13a", &eval::tokenize_13a);
  e.def("chrf", &eval::chrf, py::call_guard<py::gil_scoped_release>());
  e.def("rouge_pair", [](const std::string& prediction, const std::string& target, bool use_stemmer) {
    py::dict d;
    for (const auto& [k, s] : eval::rouge_pair(prediction, target, use_stemmer))
      d[py::str(k)] = py::make_tuple(s.precision, s.recall, s.fmeasure);
    return d;
  });
  e.def("rouge_tokenize", &eval::rouge_tokenize);
  e.def("porter_stem", &eval::porter_stem);
  e.def("squad_em", &eval::squad_em);
  e.def("squad_f1", &eval::squad_f1);
  e.def("squad_normalize", &eval::squad_normalize);
  e.def("accuracy", &eval::accuracy);
  e.def("f1_score", &eval::f1_score);
  e.def("matthews_corrcoef", &eval::matthews_corrcoef);
  e.def("pearsonr", &eval::pearsonr);
  e.def("spearmanr", &eval::spearmanr);
  e.def("perplexity", &eval::perplexity);
  e.def("weighted_perplexity", &eval::weighted_perplexity);
  e.def("bits_per_byte", &eval::bits_per_byte);
  e.def("mean_stderr", &eval::mean_stderr);
  e.def("bootstrap_stderr", &eval::bootstrap_stderr);
  // Forensics (foundry/eval/forensics.h).
  e.def("roc_auc", &eval::roc_auc);
  e.def("welch_t_test", [](const std::vector<double>& a, const std::vector<double>& b) {
    const eval::WelchTest w = eval::welch_t_test(a, b);
    return py::make_tuple(w.t, w.df, w.p_value);
  });
  e.def("student_t_sf", &eval::student_t_sf);
  e.def("zscore_columns", &eval::zscore_columns);
  e.def("average_linkage", [](const std::vector<std::vector<double>>& rows) {
    const eval::Linkage l = eval::average_linkage(rows);
    return py::make_tuple(l.merges, l.order);
  });
  e.def("least_squares", &eval::least_squares);
  e.def("zlib_size", &eval::zlib_size);
  py::class_<eval::SuffixArray>(e, "SuffixArray")
      .def(py::init<std::string>())
      .def("longest_prefix_match", [](const eval::SuffixArray& sa, const std::string& q) { return sa.longest_prefix_match(q); })
      .def("count", [](const eval::SuffixArray& sa, const std::string& q) { return sa.count(q); });
  py::class_<eval::PyRandom>(e, "PyRandom")
      .def(py::init<uint64_t>())
      .def("random", &eval::PyRandom::random)
      .def("randbelow", &eval::PyRandom::randbelow)
      .def("sample", &eval::PyRandom::sample);
}

}  // namespace foundry::python
