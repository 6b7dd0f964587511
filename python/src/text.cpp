// foundry.Tokenizer: the native tokenizers (HF tokenizer.json, SentencePiece, tiktoken, GPT-2
// files) with HF tokenizers' Python API names.
#include <pybind11/stl.h>

#include "convert.h"
#include "foundry/text/tokenizer.h"
#include "foundry/text/trainer.h"

namespace py = pybind11;
using foundry::text::Encoding;
using foundry::text::Tokenizer;

namespace foundry::python {

void bind_text(py::module_& m) {
  py::class_<Encoding>(m, "Encoding")
      .def_readonly("ids", &Encoding::ids)
      .def_readonly("type_ids", &Encoding::type_ids)
      .def_readonly("tokens", &Encoding::tokens)
      .def_readonly("offsets", &Encoding::offsets)
      .def_readonly("attention_mask", &Encoding::attention_mask)
      .def_readonly("special_tokens_mask", &Encoding::special_tokens_mask)
      .def_property_readonly("word_ids", [](const Encoding& e) {
        py::list l;
        for (int32_t w : e.word_ids) l.append(w < 0 ? py::object(py::none()) : py::object(py::int_(w)));
        return l;
      })
      .def_readonly("overflowing", &Encoding::overflowing)
      .def("__len__", &Encoding::size)
      .def("__repr__", [](const Encoding& e) { return "Encoding(num_tokens=" + std::to_string(e.size()) + ")"; });

  py::class_<Tokenizer>(m, "Tokenizer")
      .def_static("from_file", &Tokenizer::from_file, py::arg("path"),
                  "Loads tokenizer.json, a SentencePiece .model, GPT-2 encoder.json/vocab.json, or a .tiktoken file")
      .def_static("from_str", [](const std::string& json) { return Tokenizer::from_json(json); })
      .def("encode", [](const Tokenizer& t, const std::string& text, py::object pair, bool add_special_tokens) {
        py::gil_scoped_release nogil;
        if (pair.is_none()) return t.encode(text, add_special_tokens);
        std::string p;
        {
          py::gil_scoped_acquire gil;
          p = pair.cast<std::string>();
        }
        return t.encode_pair(text, p, add_special_tokens);
      }, py::arg("sequence"), py::arg("pair") = py::none(), py::arg("add_special_tokens") = true)
      .def("encode_batch", [](const Tokenizer& t, const std::vector<std::string>& texts, bool add_special_tokens) {
        py::gil_scoped_release nogil;
        return t.encode_batch(texts, add_special_tokens);
      }, py::arg("input"), py::arg("add_special_tokens") = true)
      .def("decode", [](const Tokenizer& t, const std::vector<uint32_t>& ids, bool skip) { return t.decode(ids, skip); },
           py::arg("ids"), py::arg("skip_special_tokens") = true)
      .def("decode_batch", [](const Tokenizer& t, const std::vector<std::vector<uint32_t>>& ids, bool skip) {
        return t.decode_batch(ids, skip);
      }, py::arg("sequences"), py::arg("skip_special_tokens") = true)
      .def("token_to_id", &Tokenizer::token_to_id)
      .def("id_to_token", &Tokenizer::id_to_token)
      .def("get_vocab_size", &Tokenizer::vocab_size, py::arg("with_added_tokens") = true)
      .def("get_vocab", &Tokenizer::get_vocab, py::arg("with_added_tokens") = true)
      .def("add_special_tokens", &Tokenizer::add_special_tokens)
      .def("to_str", &Tokenizer::to_json, py::arg("pretty") = false)
      .def("save", &Tokenizer::save, py::arg("path"), py::arg("pretty") = true);

  m.def("train_bpe", [](const std::vector<std::string>& files, size_t vocab_size, uint64_t min_frequency,
                        const std::vector<std::string>& special_tokens, bool byte_level) {
    text::BpeTrainerOptions o;
    o.vocab_size = vocab_size;
    o.min_frequency = min_frequency;
    o.special_tokens = special_tokens;
    o.byte_level = byte_level;
    py::gil_scoped_release nogil;
    return text::train_bpe(files, o);
  }, py::arg("files"), py::arg("vocab_size") = 30000, py::arg("min_frequency") = 0,
     py::arg("special_tokens") = std::vector<std::string>{}, py::arg("byte_level") = true);
}

}  // namespace foundry::python
