// The trainer: a run interrupted at step N and resumed from its checkpoint gives bit-identical
// losses to an uninterrupted run; the loss goes down; early stopping; bad configs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "foundry/core/parallel.h"
#include "foundry/ops/ops.h"
#include "foundry/train/trainer.h"

using namespace foundry;

namespace {

std::string corpus_path() {
  std::string p = ::testing::TempDir() + "/train_corpus.txt";
  std::ofstream f(p);
  for (int i = 0; i < 400; ++i) f << "the quick brown fox " << i % 7 << " jumps over the lazy dog.\n";
  return p;
}

train::TrainConfig tiny(const std::string& out) {
  train::TrainConfig c;
  c.data_path = corpus_path();
  c.model.block_size = 16;
  // dropout exercises the generator state in checkpoints
  c.model.hf_config = R"({"n_layer": 2, "n_head": 2, "n_embd": 16, "dropout": 0.1})";
  c.batch_size = 4;
  c.max_steps = 12;
  c.warmup_steps = 2;
  c.lr = 3e-3;
  c.eval_every = 6;
  c.eval_batches = 2;
  c.checkpoint_every = 6;
  c.out_dir = out;
  c.sample_tokens = 20;
  c.progress = false;
  c.threads = 1;
  return c;
}

}  // namespace

TEST(Trainer, ResumeIsBitIdentical) {
  std::string a = ::testing::TempDir() + "/run_a", b = ::testing::TempDir() + "/run_b";
  std::filesystem::remove_all(a);
  std::filesystem::remove_all(b);
  train::Trainer full(tiny(a));
  train::TrainResult ra = full.run();
  ASSERT_EQ(ra.losses.size(), 12u);

  {
    train::Trainer first(tiny(b));
    train::TrainResult r1 = first.run(/*stop_after=*/6);
    ASSERT_EQ(r1.steps, 6);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(r1.losses[size_t(i)], ra.losses[size_t(i)]) << i;
  }
  train::Trainer second(tiny(b));
  train::TrainResult r2 = second.run();
  EXPECT_EQ(r2.resumed_from, 6);
  ASSERT_EQ(r2.losses.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(r2.losses[size_t(i)], ra.losses[size_t(6 + i)]) << "step " << 7 + i;
  EXPECT_EQ(r2.final_val_loss, ra.final_val_loss);
  EXPECT_EQ(r2.sample, ra.sample);
  EXPECT_TRUE(std::filesystem::exists(a + "/metrics.jsonl"));
}

TEST(Trainer, LossGoesDown) {
  // The untrained model starts near the uniform loss ln(vocab); training must take the validation
  // loss clearly below where it started (a bound an untrained model fails: final == first).
  std::string out = ::testing::TempDir() + "/run_down";
  std::filesystem::remove_all(out);
  train::TrainConfig c = tiny(out);
  c.max_steps = 60;
  c.eval_every = 1000;
  c.checkpoint_every = 0;
  c.model.hf_config = R"({"n_layer": 2, "n_head": 2, "n_embd": 32, "dropout": 0.0})";
  train::Trainer t(c);
  const double untrained = t.evaluate();
  const double uniform = std::log(double(t.config().model.vocab_size));
  EXPECT_NEAR(untrained, uniform, 0.3);
  train::TrainResult r = t.run();
  EXPECT_LT(r.final_val_loss, 0.8 * untrained) << "untrained " << untrained << ", final " << r.final_val_loss;
  EXPECT_LT(r.final_val_loss, r.unigram_val_loss);  // context helps beyond token frequencies
}

TEST(Trainer, EarlyStoppingStops) {
  std::string out = ::testing::TempDir() + "/run_es";
  std::filesystem::remove_all(out);
  train::TrainConfig c = tiny(out);
  c.lr = 0.0;  // no progress: validation loss never improves
  c.min_lr = 0.0;
  c.max_steps = 60;
  c.eval_every = 3;
  c.checkpoint_every = 0;
  train::Trainer t(c);
  t.add_callback(std::make_shared<train::EarlyStopping>(2));
  train::TrainResult r = t.run();
  EXPECT_LT(r.steps, 60);
}

TEST(Trainer, BadConfigsAreClear) {
  std::string p = ::testing::TempDir() + "/bad.toml";
  std::ofstream(p) << "[train]\nmax_steps = 10\nlearning_rate = 3\n";
  try {
    train::load_train_config(p);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("train.learning_rate"), std::string::npos) << e.what();
  }
  std::ofstream(p) << "[train\nmax_steps = 10\n";
  EXPECT_THROW(train::load_train_config(p), IOError);
  std::ofstream(p) << "[train]\nprecision = \"fp8\"\n";
  EXPECT_THROW(train::load_train_config(p), ValueError);
  std::ofstream(p) << "[train]\ngrad_clip = -1.0\n";  // was taken as off, silently
  try {
    train::load_train_config(p);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("grad_clip must be 0 (off) or positive, got -1"), std::string::npos) << e.what();
  }
  for (const char* line : {"[eval]\nevery = -1\n", "[eval]\ncheckpoint_every = -5\n", "[train]\nlog_every = -1\n",
                           "[eval]\nbatches = 0\n"}) {
    std::ofstream(p) << line;  // a negative interval was taken as off without a word
    try {
      train::load_train_config(p);
      ADD_FAILURE() << line;
    } catch (const ValueError& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what.find("must be 0 (off) or more") != std::string::npos ||
                  what.find("eval.batches must be positive") != std::string::npos) << what;
    }
  }
}

// toml++ 3.3 aborts on some non-ASCII characters outside strings (U+00E9 and U+FEF6 among them):
// the pre-parse check refuses those, and must still read such characters inside strings and
// comments wherever TOML puts them.
TEST(Trainer, NonAsciiTomlOutsideStringsIsRefusedInsideIsRead) {
  const std::string p = ::testing::TempDir() + "/unicode.toml";
  for (const char* ok : {"[track]\nname = \"\xc3\x9c" "berlauf \xef\xbb\xb6\" # caf\xc3\xa9\n",
                         "[track]\nname='\xc3\xa9t\xc3\xa9'\n",
                         "[track]\nname = \"\"\"\n\xc3\xa9\n\"\"\"\n",
                         "[track]\n\"name\" = '''\xc3\xa9'''\n"}) {
    SCOPED_TRACE(ok);
    std::ofstream(p, std::ios::trunc) << ok;
    EXPECT_NO_THROW(train::load_train_config(p));
  }
  for (const char* bad : {"[track]\nname = 1\"\xc3\xa9\"\n", "[track]\nname = 2\"\"2\xef\xbb\xb6\n",
                          "[track]\nname = 0.1%''V='\xc6\xbb'\n", "[track]\nname = 1['\xc3\xa9']\n",
                          "[track]\nname = [\n  1%'\xc3\xa9',\n]\n", "[track]\nname = 'x'\xc3\xa9\n",
                          "[track]\nn\xc3\xa4me = 1\n"}) {
    SCOPED_TRACE(bad);
    std::ofstream(p, std::ios::trunc) << bad;
    try {
      train::load_train_config(p);
      ADD_FAILURE() << "accepted";
    } catch (const IOError& e) {
      EXPECT_NE(std::string(e.what()).find("non-ASCII character outside a string"), std::string::npos) << e.what();
    }
  }
}

// transformers' DataCollatorForLanguageModeling: 15% of the tokens chosen, of those 80% [MASK],
// 10% a random id, 10% unchanged; labels the chosen ids, -100 elsewhere; reproducible per generator.
TEST(Train, MaskTokensFollowsTheCollatorsProportions) {
  const int64_t n = 200000, vocab = 50, mask = 50;
  Tensor ids = randint(0, vocab, {4, n / 4});
  Generator g(5);
  auto [inputs, labels] = train::mask_tokens(ids, mask, vocab, 0.15, g);
  std::vector<int64_t> x = ids.contiguous().to_vector<int64_t>(), in = inputs.contiguous().to_vector<int64_t>(),
                       lab = labels.contiguous().to_vector<int64_t>();
  int64_t chosen = 0, masked = 0, kept = 0, changed = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (lab[size_t(i)] == -100) {
      EXPECT_EQ(in[size_t(i)], x[size_t(i)]);
      continue;
    }
    ++chosen;
    EXPECT_EQ(lab[size_t(i)], x[size_t(i)]);
    EXPECT_LT(in[size_t(i)], vocab + 1);
    if (in[size_t(i)] == mask) ++masked;
    else if (in[size_t(i)] == x[size_t(i)]) ++kept;
    else ++changed;
  }
  EXPECT_NEAR(double(chosen) / double(n), 0.15, 0.005);
  EXPECT_NEAR(double(masked) / double(chosen), 0.8, 0.01);
  // A random replacement equals the original 1 time in 50: those count as kept.
  EXPECT_NEAR(double(changed) / double(chosen), 0.1 * 49.0 / 50.0, 0.01);
  EXPECT_NEAR(double(kept) / double(chosen), 0.1 + 0.1 / 50.0, 0.01);
  Generator g2(5);
  EXPECT_TRUE(equal(train::mask_tokens(ids, mask, vocab, 0.15, g2).first, inputs));
  EXPECT_THROW(train::mask_tokens(ids, mask, vocab, 0.0, g2), ValueError);
}

// T5's span corruption: every token lands either in the input (kept) or in the labels (after its
// span's sentinel), in order; sentinels count down from the top; both end with EOS; the noise
// fraction and the span count follow noise_density and mean_noise_span_length.
TEST(Train, SpanCorruptionSplitsTokensIntoInputsAndTargets) {
  const int64_t B = 3, L = 64, top = 199, eos = 101;
  Tensor ids = randint(0, 100, {B, L});
  Generator g(9);
  auto [inputs, labels] = train::span_corrupt(ids, top, eos, 0.15, 3.0, g);
  const int64_t noise = 10, spans = train::noise_spans(L, 0.15, 3.0);  // round(64 * 0.15), round(10 / 3)
  EXPECT_EQ(spans, 3);
  ASSERT_EQ(inputs.size(1), L - noise + spans + 1);
  ASSERT_EQ(labels.size(1), noise + spans + 1);
  std::vector<int64_t> x = ids.contiguous().to_vector<int64_t>(), in = inputs.contiguous().to_vector<int64_t>(),
                       out = labels.contiguous().to_vector<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    // Rebuild the sequence: walk the input; at sentinel k, splice in the labels' span k.
    std::vector<int64_t> rebuilt;
    const int64_t* ri = in.data() + b * inputs.size(1);
    const int64_t* ro = out.data() + b * labels.size(1);
    EXPECT_EQ(ri[inputs.size(1) - 1], eos);
    EXPECT_EQ(ro[labels.size(1) - 1], eos);
    int64_t o = 0, sentinel = 0;
    for (int64_t i = 0; i + 1 < inputs.size(1); ++i) {
      if (ri[i] > 100) {
        EXPECT_EQ(ri[i], top - sentinel);
        EXPECT_EQ(ro[o], top - sentinel);
        ++o, ++sentinel;
        while (o + 1 < labels.size(1) && ro[o] < 100) rebuilt.push_back(ro[o++]);
      } else {
        rebuilt.push_back(ri[i]);
      }
    }
    EXPECT_EQ(sentinel, spans);
    EXPECT_EQ(rebuilt, std::vector<int64_t>(x.begin() + b * L, x.begin() + (b + 1) * L));
  }
  EXPECT_THROW(train::span_corrupt(ids, top, eos, 0.0, 3.0, g), ValueError);
}
