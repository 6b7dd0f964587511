// Data pipeline: token shards, encoders, prepared datasets, deterministic batches, prefetching;
// and the progress bar's rendering.
#include <gtest/gtest.h>

#include <cstdio>
#include <algorithm>
#include <fstream>

#include "foundry/data/dataset.h"
#include "foundry/ops/ops.h"
#include "foundry/train/progress.h"

using namespace foundry;
using namespace foundry::data;

namespace {
std::string tmp(const std::string& name) { return ::testing::TempDir() + "/" + name; }
void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
}  // namespace

TEST(TokenShard, RoundTripNarrowAndWide) {
  write_token_shard(tmp("a.bin"), {1, 2, 65535, 7});
  TokenShard a = TokenShard::open(tmp("a.bin"));
  EXPECT_FALSE(a.wide());
  EXPECT_EQ(a.size(), 4);
  EXPECT_EQ(a[2], 65535u);
  write_token_shard(tmp("b.bin"), {1, 70000});
  TokenShard b = TokenShard::open(tmp("b.bin"));
  EXPECT_TRUE(b.wide());
  EXPECT_EQ(b[1], 70000u);
}

TEST(TokenShard, BadFilesGiveClearErrors) {
  write(tmp("short.bin"), "abc");
  EXPECT_THROW(TokenShard::open(tmp("short.bin")), IOError);
  write_token_shard(tmp("t.bin"), {1, 2, 3});
  std::string bytes;
  {
    std::ifstream f(tmp("t.bin"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  write(tmp("trunc.bin"), bytes.substr(0, bytes.size() - 1));
  try {
    TokenShard::open(tmp("trunc.bin"));
    FAIL();
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos);
  }
  bytes[0] = 'X';
  write(tmp("magic.bin"), bytes);
  EXPECT_THROW(TokenShard::open(tmp("magic.bin")), IOError);
}

TEST(Encoders, CharAndByteRoundTrip) {
  TextEncoder c = TextEncoder::chars_of("hello wörld");
  EXPECT_EQ(c.vocab_size(), 9);
  EXPECT_EQ(c.decode(c.encode("wörld hell")), "wörld hell");
  EXPECT_THROW(c.encode("z"), ValueError);
  TextEncoder d = TextEncoder::from_description(c.describe());
  EXPECT_EQ(d.encode("hello"), c.encode("hello"));
  TextEncoder b = TextEncoder::bytes();
  EXPECT_EQ(b.decode(b.encode("\xff\x01x")), "\xff\x01x");
}

TEST(Dataset, PrepareAndBatchDeterministically) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "line number " + std::to_string(i) + "\n";
  write(tmp("corpus.txt"), text);
  TextEncoder enc = TextEncoder::chars_of(text);
  PreparedDataset p = prepare_dataset(tmp("corpus.txt"), tmp("prepared"), enc, 0.1);
  EXPECT_EQ(p.train_tokens + p.val_tokens, int64_t(enc.encode(text).size()));
  auto shard = std::make_shared<TokenShard>(TokenShard::open(p.train_path));
  LMBatches batches(shard, 4, 16, /*seed=*/7);
  auto [x1, y1] = batches.get(3);
  auto [x2, y2] = batches.get(3);
  EXPECT_TRUE(equal(x1, x2));
  EXPECT_EQ(Shape(x1.sizes()), (Shape{4, 16}));
  // y is x shifted by one token.
  EXPECT_TRUE(equal(x1.slice(1, 1, None), y1.slice(1, 0, -1)));
  EXPECT_FALSE(equal(batches.get(4).first, x1));
  Prefetcher<std::pair<Tensor, Tensor>> loader([&](int64_t i) { return batches.get(i); }, 2, 0);
  loader.next();
  loader.next();
  EXPECT_EQ(loader.position(), 2);
  loader.seek(3);
  EXPECT_TRUE(equal(loader.next().first, x1));
}

TEST(Dataset, JsonlFieldSelection) {
  write(tmp("d.jsonl"), "{\"a\": {\"text\": \"xy\"}}\n{\"b\": 1}\n\n{\"a\": {\"text\": \"z\"}}\n");
  std::vector<std::string> got;
  for_each_jsonl(tmp("d.jsonl"), "a.text", [&](const std::string& t) { got.push_back(t); });
  EXPECT_EQ(got, (std::vector<std::string>{"xy", "z"}));
  write(tmp("bad.jsonl"), "{\"a\": \"ok\"}\n{oops\n");
  try {
    for_each_jsonl(tmp("bad.jsonl"), "a", [](const std::string&) {});
    FAIL();
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find(":2:"), std::string::npos) << e.what();
  }
}

TEST(Progress, RendersLikeTqdm) {
  train::ProgressBar::Options o;
  o.desc = "train";
  o.force_tty = 0;
  o.width = 80;
  o.stream = std::tmpfile();
  train::ProgressBar bar(200, o);
  bar.update(50);
  bar.set_postfix("loss", 1.23456);
  std::string line = bar.render();
  EXPECT_NE(line.find("train:  25%|"), std::string::npos) << line;
  EXPECT_NE(line.find("50/200"), std::string::npos) << line;
  EXPECT_NE(line.find("loss=1.235"), std::string::npos) << line;
  EXPECT_EQ(train::format_duration(3725), "1:02:05");
  bar.close();
}

TEST(DataLoader, ShufflesDeterministicallyDropsLastAndResumes) {
  using Loader = DataLoader<int64_t, std::vector<int64_t>>;
  auto collate = [](std::vector<int64_t> items) { return items; };
  Loader::Options o{.batch_size = 3, .shuffle = true, .drop_last = true, .seed = 5};
  Loader a(10, [](int64_t i) { return i; }, collate, o);
  EXPECT_EQ(a.batches_per_epoch(), 3);
  std::vector<int64_t> seen;
  for (int k = 0; k < 3; ++k)
    for (int64_t v : a.next()) seen.push_back(v);
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end());  // no repeats within an epoch
  std::vector<int64_t> b4 = a.next();
  Loader b(10, [](int64_t i) { return i; }, collate, o, /*start=*/3);
  EXPECT_EQ(b.next(), b4);  // resuming at batch 3 gives the same batch
  Loader::Options keep{.batch_size = 4, .shuffle = false, .drop_last = false};
  Loader c(10, [](int64_t i) { return i; }, collate, keep);
  c.next();
  c.next();
  EXPECT_EQ(c.next(), (std::vector<int64_t>{8, 9}));
}
