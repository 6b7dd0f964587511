// bench_infer --products FORMAT (products.cpp).
#pragma once

#include <string>

namespace foundry::bench {

/// Prints one JSON line: decode's matrix-vector products over one token of Llama-110M's weights in
/// `format`, against a plain sum over as many bytes (medians of `rounds`, alternating).
int products_bench(const std::string& format, int rounds);

}  // namespace foundry::bench
