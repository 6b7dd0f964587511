// Inputs that once crashed a libFuzzer target (tests/fuzz/regressions/TARGET/) must be refused
// with a foundry error in the release build too, not only replayed in the sanitizer tree. Each
// is written to a file and handed to the parser the target drives.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "foundry/core/error.h"
#include "foundry/io/atomic_file.h"
#include "foundry/io/npy.h"
#include "foundry/models/chat_template.h"
#include "foundry/models/forward_inputs.h"
#include "foundry/text/tokenizer.h"
#include "foundry/train/trainer.h"

namespace fs = std::filesystem;

namespace {

// Calls check(path of a file holding the input) for every regression input of `target`.
void for_each_regression(const std::string& target, const std::function<void(const std::string&)>& check) {
  const fs::path dir = fs::path(FOUNDRY_SOURCE_DIR) / "tests" / "fuzz" / "regressions" / target;
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  int n = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    SCOPED_TRACE(entry.path().string());
    check(entry.path().string());
    ++n;
  }
  EXPECT_GT(n, 0);
}

std::string scratch(const std::string& name, const std::string& bytes) {
  fs::path p = fs::temp_directory_path() / ("foundry-regression-" + std::to_string(::getpid()) + "-" + name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p.string();
}

}  // namespace

// fn() either returns or raises a foundry error (anything else fails the test).
static void read_or_refuse(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const foundry::Error&) {
  }
}

TEST(FuzzRegressions, NpyAndNpzInputsAreReadOrRefused) {
  // As tests/fuzz/npy.cpp drives them: the bytes as .npy, then as an .npz archive (one of which
  // declared a 4 GB entry, once allocated before reading).
  for_each_regression("npy", [](const std::string& path) {
    read_or_refuse([&] { foundry::io::parse_npy(foundry::io::read_file(path), path); });
    read_or_refuse([&] { foundry::io::load_npz(path); });
  });
}

TEST(FuzzRegressions, NpyBoolBytesBeyondOneReadAsTrue) {
  // Found by fuzz_npy: a bool array holding the byte 32 was copied as an invalid bool.
  std::string header = "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string npy = std::string("\x93NUMPY\x01\x00", 8) + char(header.size()) + '\0' + header + std::string("\x00\x20\x01", 3);
  foundry::Tensor t = foundry::io::parse_npy(npy, "bools.npy");
  EXPECT_EQ(t.to(foundry::DType::Int64).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1}));
}

TEST(FuzzRegressions, TiktokenRankBeyond64BitsIsAValueError) {
  for_each_regression("tiktoken", [](const std::string& path) {
    std::string bytes = foundry::io::read_file(path);
    ASSERT_FALSE(bytes.empty());
    const std::string ranks = scratch("ranks.tiktoken", bytes.substr(1));  // byte 0 picks the encoding
    EXPECT_THROW(foundry::text::Tokenizer::from_tiktoken(ranks, foundry::text::TiktokenEncoding::R50kBase),
                 foundry::ValueError);
    fs::remove(ranks);
  });
  const std::string big = scratch("big.tiktoken", "IQ== 4294967296\n");  // 2^32: no longer narrowed
  EXPECT_THROW(foundry::text::Tokenizer::from_tiktoken(big, foundry::text::TiktokenEncoding::R50kBase),
               foundry::ValueError);
  fs::remove(big);
}

TEST(FuzzRegressions, SentencePieceEmptyCharsmapTrieIsAValueError) {
  // Found by fuzz_sentencepiece: a precompiled_charsmap whose trie is 0 bytes was copied into an
  // empty vector (memcpy to its null data(), undefined even for 0 bytes) before being refused.
  for_each_regression("sentencepiece", [](const std::string& path) {
    try {
      foundry::text::Tokenizer::from_sentencepiece_bytes(foundry::io::read_file(path));
      ADD_FAILURE() << "loaded";
    } catch (const foundry::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("precompiled_charsmap has an empty trie"), std::string::npos) << e.what();
    }
  });
}

TEST(FuzzRegressions, ChatTemplatesFoundByTheFuzzerAreValueErrors) {
  // Found by fuzz_chat_template: an integer literal of 120 digits escaped as std::out_of_range from
  // std::stoll, which ended the program (CI's 20-second run); "{{-}}" took its one '-' for both
  // whitespace markers and popped the empty expression's last character (UBSan).
  for_each_regression("chat_template", [](const std::string& path) {
    const std::string input = foundry::io::read_file(path);
    const std::string source = input.substr(0, input.find("\n--foundry-fuzz-part--\n"));
    EXPECT_THROW(foundry::models::ChatTemplate{source}, foundry::ValueError);
  });
  EXPECT_THROW(foundry::models::ChatTemplate{"{{ 99999999999999999999 }}"}, foundry::ValueError);
  EXPECT_EQ(foundry::models::ChatTemplate{"{{ 9223372036854775807 }}"}.render("{}"), "9223372036854775807");
}

TEST(FuzzRegressions, TomlTableHeaderWithoutAKeyNameIsAnIOError) {
  for_each_regression("train_toml", [](const std::string& path) {
    EXPECT_THROW(foundry::train::load_train_config(path), foundry::IOError);
  });
  const std::string brackets = scratch("brackets.toml", "[[[data]]]\n");  // toml++ reads "[[" then a key
  EXPECT_THROW(foundry::train::load_train_config(brackets), foundry::IOError);
  fs::remove(brackets);
  // Non-ASCII outside strings and comments reached __builtin_unreachable inside toml++ 3.3.
  const std::string accent = scratch("accent.toml", "[data]\n\xC3\xA9 = 1\n");
  EXPECT_THROW(foundry::train::load_train_config(accent), foundry::IOError);
  fs::remove(accent);
  // Brackets that are array values, not headers, and non-ASCII text in strings and comments are
  // still read by toml++.
  const std::string ok = scratch("arrays.toml", "[data]\npath = \"x [ \xC3\xA9\" # caf\xC3\xA9\n[model]\nblock_size = 8\n");
  EXPECT_NO_THROW(foundry::train::load_train_config(ok));
  fs::remove(ok);
}

TEST(FuzzRegressions, TomlParserInvariantsAreIOErrors) {
  // CI's fuzz run met toml++'s key-reader assertion behind a header holding ''' (the line-based
  // pre-check took it for the start of a multi-line string): toml++'s invariants now throw.
  const std::string quotes = scratch("quotes.toml", "[:['''laye");
  EXPECT_THROW(foundry::train::load_train_config(quotes), foundry::IOError);
  // ''' inside a one-line string opens nothing: the line after it is still checked.
  const std::string after = scratch("after.toml", "[data]\npath = \"'''\"\n\xC3\xA9 = 1\n");
  EXPECT_THROW(foundry::train::load_train_config(after), foundry::IOError);
  // Multi-line strings, arrays of tables, nested arrays across lines and non-ASCII in strings
  // and comments are TOML, and read.
  const std::string valid = scratch("valid.toml",
                                    "# \xC3\xA9t\xC3\xA9\n[data]\npath = '''\n[not a header]\n\xC3\xA9'''\n"
                                    "field = \"\"\"a \\\"\"\" [ \\\n  b\"\"\"\n[model]\nblock_size = 8\n"
                                    "[[sample.extra]]\nx = [\n  [1, 2],\n  ['[', \"]\"],\n]\n");
  try {
    foundry::train::load_train_config(valid);
    ADD_FAILURE() << "unknown key sample.extra was accepted";
  } catch (const foundry::Error& e) {
    // Parsed: the only complaint is the unknown table, not the syntax.
    EXPECT_NE(std::string(e.what()).find("sample.extra"), std::string::npos) << e.what();
  }
  for (const auto& p : {quotes, after, valid}) fs::remove(p);
}

TEST(FuzzRegressions, NonAsciiAfterABackslashInAMultiLineStringIsAnIOError) {
  // The fuzzer's ten-minute run: a backslash then U+FEC6 inside """ reached toml++'s unreachable
  // whitespace branch in a noexcept function (std::terminate).
  auto refused = [](const std::string& name, const std::string& body, const std::string& says, int line) {
    const std::string p = scratch(name, "[data]\npath = \"\"\"a" + body + "\"\"\"\n");
    try {
      foundry::train::load_train_config(p);
      ADD_FAILURE() << name << " was accepted";
    } catch (const foundry::IOError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(": line " + std::to_string(line) + ":"), std::string::npos) << e.what();
    }
    fs::remove(p);
  };
  refused("escape.toml", "\\\xEF\xBB\x86", "not a TOML escape", 2);
  refused("spaces.toml", "\\  \xC2\xA1", "must be the last character", 2);
  refused("continued.toml", "\\\n\xC2\xA1", "first one after a line-ending backslash", 3);
  // Line-ending backslashes before ASCII text, escapes and non-ASCII elsewhere in the string parse.
  const std::string ok =
      scratch("continued-ok.toml", "[data]\npath = \"\"\"\xC2\xA1\\\n  \n  b\\\"\\t\xC2\xA1\\  \n c\"\"\"\n");
  EXPECT_EQ(foundry::train::load_train_config(ok).data_path, "\xC2\xA1" "b\"\t\xC2\xA1" "c");
  fs::remove(ok);
}

TEST(FuzzRegressions, ForwardInputsRefuseRaggedAndUnknownKeys) {
  using foundry::models::parse_forward_inputs;
  for_each_regression("forward_inputs", [](const std::string& path) {
    read_or_refuse([&] { parse_forward_inputs(foundry::io::read_file(path), path); });
  });
  EXPECT_THROW(parse_forward_inputs(R"({"input_ids": [[1, 2], [3]]})", "in.json"), foundry::ValueError);
  EXPECT_THROW(parse_forward_inputs(R"({"input_ids": [[1, 2]], "attention_mask": [[1]]})", "in.json"),
               foundry::ValueError);
  EXPECT_THROW(parse_forward_inputs(R"({"input_ids": [[1, 2]], "attention_masks": [[1, 1]]})", "in.json"),
               foundry::ValueError);
  EXPECT_THROW(parse_forward_inputs(R"([[1, 2]])", "in.json"), foundry::ValueError);
  // A float that no int64 holds (found by fuzz_forward_inputs: an undefined cast inside nlohmann).
  EXPECT_THROW(parse_forward_inputs(R"({"input_ids": [[1e21]]})", "in.json"), foundry::ValueError);
  EXPECT_THROW(parse_forward_inputs(R"({"input_ids": [[1.5]]})", "in.json"), foundry::ValueError);
  EXPECT_THROW(parse_forward_inputs(R"({"input_ids": [[18446744073709551615]]})", "in.json"), foundry::ValueError);
  auto in = parse_forward_inputs(R"({"input_ids": [[1, 2, 3]], "decoder_input_ids": [[0]]})", "in.json");
  EXPECT_EQ(in.input_ids.size(0), 1);
  EXPECT_EQ(in.input_ids.size(1), 3);
  EXPECT_EQ(in.decoder_input_ids.size(1), 1);
  EXPECT_FALSE(in.attention_mask.defined());
}
