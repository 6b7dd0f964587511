// MambaForCausalLM (HF v4.40): RMSNorm pre-norm blocks around the selective-state-space mixer
// (models/hf/mamba_mixer.h), no attention and no positions; the head tied to the embeddings by
// default. The attention mask is ignored, as transformers' Mamba does. Generation carries each
// layer's convolution window and SSM state in the cache.
#include "foundry/ops/ops.h"
#include "models/hf/mamba_mixer.h"

namespace foundry::models::hf {

namespace {

class MambaBlock : public nn::Module {
 public:
  MambaBlock(const WeightSource& ws, const ModelConfig& c, const MambaOptions& o) {
    norm = add_block<Norm>(*this, ws, "norm", c.hidden_size, Norm::Kind::RMSNorm, c.norm_eps);
    mixer = add_block<MambaMixer>(*this, ws, "mixer", c.hidden_size, o);
  }
  std::string type_name() const override { return "MambaBlock"; }
  Tensor forward(const Tensor& h, KVCache* cache, int64_t layer) { return h + mixer->forward(norm->forward(h), cache, layer); }
  std::shared_ptr<Norm> norm;
  std::shared_ptr<MambaMixer> mixer;
};

class Mamba : public CausalLM {
 public:
  Mamba(const ModelConfig& c, const WeightSource& ws, const MambaOptions& o) : CausalLM(c, ws.products()) {
    const WeightSource bws = ws.pp("backbone");
    backbone = register_module("backbone", std::make_shared<Scope>("MambaModel"));
    embeddings = add_block<Embedding>(*backbone, bws, "embeddings", c.vocab_size, c.hidden_size);
    auto list = backbone->register_module("layers", std::make_shared<Scope>("ModuleList"));
    for (int64_t i = 0; i < c.num_layers; ++i)
      layers.push_back(add_block<MambaBlock>(*list, bws.pp("layers"), std::to_string(i), c, o));
    norm_f = add_block<Norm>(*backbone, bws, "norm_f", c.hidden_size, Norm::Kind::RMSNorm, c.norm_eps);
    lm_head = c.tie_word_embeddings
                  ? register_module("lm_head", std::make_shared<Linear>(ws.pp("lm_head"), embeddings->weight))
                  : add_block<Linear>(*this, ws, "lm_head", c.hidden_size, c.vocab_size, false);
    dtype_ = embeddings->weight.dtype();
  }
  KVCache make_cache(int64_t batch, int64_t) const override { return KVCache::recurrent(batch); }
  bool recurrent() const override { return true; }

  Tensor run(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache, int64_t last_positions) override {
    const ForwardInputs in = begin_forward(config_, input_ids, attention_mask, cache);
    Tensor h = embeddings->forward(input_ids);
    for (size_t i = 0; i < layers.size(); ++i) {
      std::shared_ptr<MambaBlock> layer = layers[i];
      h = checkpointed(*this, [layer, cache, i](const Tensor& x) { return layer->forward(x, cache, int64_t(i)); }, h);
    }
    h = end_layers(h, cache, in.T, last_positions);
    return head(*lm_head, norm_f->forward(h));
  }

  std::shared_ptr<Scope> backbone;
  std::shared_ptr<Embedding> embeddings;
  std::vector<std::shared_ptr<MambaBlock>> layers;
  std::shared_ptr<Norm> norm_f;
  std::shared_ptr<Linear> lm_head;
};

}  // namespace

Architecture mamba_architecture() {
  auto parse = [](const json& j, ModelConfig& c) {
    parse_recurrent_sizes(j, c, /*tie_default=*/true);
    parse_mamba_options(j, c, "");  // checks the mixer's keys now
  };
  auto build = [](const ModelConfig& c, const WeightSource& ws) -> std::unique_ptr<CausalLM> {
    return std::make_unique<Mamba>(c, ws, parse_mamba_options(json::parse(c.json), c, ""));
  };
  return {{"MambaForCausalLM"}, "mamba", parse, build};
}

}  // namespace foundry::models::hf
