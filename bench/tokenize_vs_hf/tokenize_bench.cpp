// Foundry side of the tokenizer benchmark: encodes the corpora one line at a time on one
// thread (encode with offsets, and ids only) and as one batch on all threads, and prints one
// JSON object per measurement. Run through bench.js, which runs HF tokenizers and tiktoken on
// the same lines and prints the comparison table.
//
// usage: tokenize_bench <name>=<tokenizer file>[@<tiktoken encoding>] ... -- <corpus files...>
#include "../bench_main.h"
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "foundry/text/tokenizer.h"

using foundry::text::Tokenizer;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<std::string> read_lines(const std::vector<std::string>& files) {
  std::vector<std::string> lines;
  for (auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open the corpus file " + f);
    std::string line;
    while (std::getline(in, line)) lines.push_back(line);
  }
  return lines;
}

Tokenizer load(const std::string& spec) {
  size_t at = spec.find('@');
  if (at == std::string::npos) return Tokenizer::from_file(spec);
  std::string path = spec.substr(0, at), enc = spec.substr(at + 1);
  using E = foundry::text::TiktokenEncoding;
  E e = enc == "r50k_base" ? E::R50kBase : enc == "p50k_base" ? E::P50kBase : enc == "o200k_base" ? E::O200kBase : E::Cl100kBase;
  Tokenizer t = Tokenizer::from_tiktoken(path, e);
  t.set_encode_special_tokens(true);  // encode_ordinary
  return t;
}

void report(const std::string& name, const std::string& mode, size_t bytes, size_t tokens, double secs) {
  std::cout << "{\"impl\":\"foundry\",\"tokenizer\":\"" << name << "\",\"mode\":\"" << mode << "\",\"bytes\":" << bytes
            << ",\"tokens\":" << tokens << ",\"seconds\":" << secs << ",\"mb_s\":" << bytes / secs / 1e6
            << ",\"tok_s\":" << tokens / secs << "}" << std::endl;
}

}  // namespace

static int run(int argc, char** argv) {
  std::vector<std::pair<std::string, std::string>> toks;
  std::vector<std::string> files;
  bool corpus = false;
  int repeat = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      corpus = true;
    } else if (a.rfind("--repeat=", 0) == 0) {
      repeat = int(foundry::bench::integer_value("--repeat", a.substr(9), 1));
    } else if (corpus) {
      files.push_back(a);
    } else {
      size_t eq = a.find('=');
      if (eq == std::string::npos || eq == 0) foundry::bench::unknown_option(a);
      toks.emplace_back(a.substr(0, eq), a.substr(eq + 1));
    }
  }
  if (toks.empty() || files.empty())
    throw std::invalid_argument("give at least one NAME=TOKENIZER_FILE, then --, then at least one corpus file");
  std::vector<std::string> lines = read_lines(files);
  size_t bytes = 0;
  for (auto& l : lines) bytes += l.size();
  // Each mode gets a freshly loaded tokenizer (empty caches), warmed up on the first lines
  // like the reference runs are.
  size_t warm = std::min<size_t>(2000, lines.size());
  for (auto& [name, path] : toks) {
    for (int r = 0; r < repeat; ++r) {
      {
        Tokenizer tok = load(path);
        for (size_t i = 0; i < warm; ++i) tok.encode(lines[i], false);
        size_t ntok = 0;
        double t0 = now();
        for (auto& l : lines) ntok += tok.encode(l, false).ids.size();
        report(name, "encode (1 thread)", bytes, ntok, now() - t0);
      }
      {
        Tokenizer tok = load(path);
        for (size_t i = 0; i < warm; ++i) tok.encode_ids(lines[i], false);
        size_t ntok = 0;
        double t0 = now();
        for (auto& l : lines) ntok += tok.encode_ids(l, false).size();
        report(name, "ids only (1 thread)", bytes, ntok, now() - t0);
      }
      {
        Tokenizer tok = load(path);
        std::vector<std::string> head(lines.begin(), lines.begin() + static_cast<long>(warm));
        tok.encode_batch(head, false);
        double t0 = now();
        auto encs = tok.encode_batch(lines, false);
        double secs = now() - t0;
        size_t ntok = 0;
        for (auto& e : encs) ntok += e.ids.size();
        report(name, "batch (all threads)", bytes, ntok, secs);
      }
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  return foundry::bench::guarded_main(argc, argv, 
      "usage: tokenize_bench [--repeat=N] NAME=TOKENIZER_FILE... -- CORPUS_FILE...\n"
      "Encodes every corpus line with each tokenizer; one JSON line per (tokenizer, mode).\n", [&] { return run(argc, argv); });
}
