// libFuzzer target: GGUF files (llama.cpp's format). Opening validates the header, metadata and
// tensor table against the file; every tensor the table admits must then be readable (raw bytes,
// and dequantized when small), and the tokenizer metadata must load or be refused with an error.
//   scripts/fuzz.sh gguf
#include "foundry/core/error.h"
#include "foundry/io/gguf.h"
#include "foundry/models/gguf.h"
#include "foundry/text/tokenizer.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write("model.gguf", fuzz::text(data, size));
  try {
    foundry::io::GGUFFile f = foundry::io::GGUFFile::open(path);
    for (const std::string& key : f.keys()) (void)f.metadata().at(key);
    for (const foundry::io::GGUFTensorInfo& t : f.tensors()) {
      try {
        (void)f.raw(t.name);
        int64_t numel = 1;
        for (int64_t d : t.dims) numel *= d;
        if (numel <= (1 << 16)) (void)f.tensor(t.name);
      } catch (const foundry::Error&) {
      }
    }
  } catch (const foundry::Error&) {
  }
  try {
    foundry::models::load_gguf_tokenizer(path);
  } catch (const foundry::Error&) {
  }
  return 0;
}
