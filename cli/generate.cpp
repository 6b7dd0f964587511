// `foundry generate`, `foundry forward` and `foundry info` over a Hugging Face model folder.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "commands.h"
#include "foundry/autograd/grad_mode.h"
#include "foundry/core/error.h"
#include "foundry/core/parallel.h"
#include "foundry/io/npy.h"
#include "foundry/models/generate.h"
#include "foundry/models/seq2seq.h"
#include "foundry/models/encoder.h"
#include "foundry/models/forward_inputs.h"
#include "foundry/models/gguf.h"
#include "foundry/models/perplexity.h"
#include "foundry/models/quantized_folder.h"
#include "foundry/models/pretrained.h"
#include "foundry/models/tokenizer_files.h"
#include "foundry/ops/ops.h"
#include "foundry/text/tokenizer.h"

namespace foundry::cli {

namespace {

namespace fs = std::filesystem;

std::vector<int64_t> parse_ids(const std::string& s) {
  std::vector<int64_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) raise<ValueError>("--input-ids: an empty item in '{}' (ids are separated by single commas)", s);
    try {
      size_t used = 0;
      ids.push_back(std::stoll(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      raise<ValueError>("--input-ids: '{}' is not an integer", item);
    }
  }
  if (ids.empty()) raise<ValueError>("--input-ids: no ids given");
  return ids;
}

models::LoadOptions load_options(const std::string& dtype, const std::string& quantize = "",
                                 const std::string& kv_cache = "", const std::string& prefill = "auto") {
  models::LoadOptions o;
  o.quantized_prefill = prefill;
  o.pack_bf16 = true;  // inference: a bf16 checkpoint run in bf16 reads its weights packed, the same values
  if (dtype == "native") o.dtype = std::nullopt;
  o.quantize = quantize;
  o.kv_cache = kv_cache;
  return o;
}

std::string id_list_json(const std::vector<int64_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

void add_generate(CLI::App& app) {
  struct Opts {
    std::string model, prompt, input_ids, draft_model, early_stopping = "false", dtype = "float32", quantize, kv_cache,
        quantized_prefill = "auto", adapter;
    bool merge = false;
    int64_t max_new_tokens = 32, top_k = 0, num_beams = 1, num_return_sequences = 1, no_repeat_ngram_size = 0,
            lookahead = 4;
    double temperature = 1.0, top_p = 1.0, min_p = 0.0, typical_p = 1.0, repetition_penalty = 1.0,
           presence_penalty = 0.0, frequency_penalty = 0.0, length_penalty = 1.0;
    uint64_t seed = 0;
    std::vector<std::string> stop;
    bool ignore_eos = false, print_ids = false, stream = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("generate", "continue a prompt with a pretrained model (HF folder)");
  cmd->add_option("--model", o->model, "Hugging Face model folder")->required();
  cmd->add_option("--dtype", o->dtype, "compute dtype: float32 (default) or native (the checkpoint's own)")
      ->check(CLI::IsMember({"float32", "native"}));
  cmd->add_option("--adapter", o->adapter, "a LoRA adapter folder (PEFT layout) applied to the model");
  cmd->add_flag("--merge", o->merge, "merge the adapter into the weights at load (default: separate LoRA layers)");
  cmd->add_option("--quantize", o->quantize,
                  "compute with quantized copies of the weights: q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K, q6_K, nf4, "
                  "f16 or bf16 (llama.cpp's formats)")
      ->check(CLI::IsMember({"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_K", "q5_K", "q6_K", "nf4", "f16", "bf16"},
                            CLI::ignore_case));
  cmd->add_option("--kv-cache", o->kv_cache, "store the KV cache as f16, bf16 or q8_0 (default: the compute dtype)")
      ->check(CLI::IsMember({"f16", "bf16", "q8_0"}));
  cmd->add_option("--quantized-prefill", o->quantized_prefill,
                  "prefill math with quantized weights: auto (integer where the CPU has AVX-512 VNNI, on AMX-INT8 "
                  "tiles where present; else bfloat16 where the CPU has native bf16; else integer where it has "
                  "AVX2; else float32), integer (decode's integer dot products), float32 or bfloat16 (a GEMM on "
                  "the dequantized weights)")
      ->check(CLI::IsMember({"auto", "integer", "float32", "bfloat16"}));
  auto* prompt = cmd->add_option("--prompt", o->prompt, "prompt text (needs the folder's tokenizer)");
  auto* ids = cmd->add_option("--input-ids", o->input_ids, "prompt token ids, e.g. 1,2,3");
  prompt->excludes(ids);
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate (default 32)");
  cmd->add_option("--temperature", o->temperature,
                  "sampling temperature; 0 means greedy (greedy also when no sampling option is given)")
      ->check(sampling_temperature());
  cmd->add_option("--top-k", o->top_k, "keep the k most likely tokens (sampling)");
  cmd->add_option("--top-p", o->top_p, "nucleus sampling mass");
  cmd->add_option("--min-p", o->min_p, "drop tokens below min_p x the top probability");
  cmd->add_option("--typical-p", o->typical_p, "locally typical sampling mass");
  cmd->add_option("--repetition-penalty", o->repetition_penalty, "HF's repetition penalty");
  cmd->add_option("--presence-penalty", o->presence_penalty, "subtract from tokens already generated");
  cmd->add_option("--frequency-penalty", o->frequency_penalty, "subtract per earlier occurrence in the output");
  cmd->add_option("--no-repeat-ngram-size", o->no_repeat_ngram_size, "never repeat an n-gram of this size");
  cmd->add_option("--num-beams", o->num_beams, "beam search with this many beams");
  cmd->add_option("--length-penalty", o->length_penalty, "beam score = log p / length ** length_penalty");
  cmd->add_option("--early-stopping", o->early_stopping, "beam search stopping: false, true or never")
      ->check(CLI::IsMember({"false", "true", "never"}));
  cmd->add_option("--num-return-sequences", o->num_return_sequences, "beams to print (best first)");
  cmd->add_option("--draft-model", o->draft_model, "smaller model of the same tokenizer for speculative decoding");
  cmd->add_option("--lookahead", o->lookahead, "draft tokens proposed per step (speculative decoding)");
  cmd->add_option("--stop", o->stop, "stop when the output contains this text (repeatable)");
  auto* seed = cmd->add_option("--seed", o->seed, "random seed; sampling is reproducible for a seed")
      ->check(count_or_zero("seed", "seed 0"));
  cmd->add_flag("--ignore-eos", o->ignore_eos, "keep generating past EOS");
  cmd->add_flag("--print-ids", o->print_ids, "print the generated ids as a JSON list on the last line");
  cmd->add_flag("--stream", o->stream, "print tokens as they are generated");
  add_threads_option(cmd);
  cmd->callback([o, cmd, seed] {
    if (o->prompt.empty() && o->input_ids.empty()) raise<ValueError>("generate: give --prompt or --input-ids");
    auto model = load_model(o->model, load_options(o->dtype, o->quantize, o->kv_cache, o->quantized_prefill), o->adapter,
                            o->merge);
    auto tok = models::folder_tokenizer(o->model);
    std::vector<int64_t> prompt_ids;
    if (!o->prompt.empty()) {
      if (!tok) raise<ValueError>("generate: --prompt needs a tokenizer in {}; use --input-ids", o->model);
      for (uint32_t id : tok->encode_ids(o->prompt)) prompt_ids.push_back(int64_t(id));
      if (prompt_ids.empty()) raise<ValueError>("generate: the prompt encodes to no tokens");
    } else {
      prompt_ids = parse_ids(o->input_ids);
    }
    auto decode = [&](const std::vector<int64_t>& t) {
      std::vector<uint32_t> u(t.begin(), t.end());
      return tok->decode(u);
    };
    models::GenerationConfig g;
    g.max_new_tokens = o->max_new_tokens;
    const bool sampling_asked = cmd->count("--temperature") || cmd->count("--top-k") || cmd->count("--top-p") ||
                                cmd->count("--min-p") || cmd->count("--typical-p") || seed->count();
    g.do_sample = sampling_asked && o->temperature > 0 && o->num_beams == 1;
    g.temperature = o->temperature;
    g.top_k = o->top_k;
    g.top_p = o->top_p;
    g.min_p = o->min_p;
    g.typical_p = o->typical_p;
    g.repetition_penalty = o->repetition_penalty;
    g.presence_penalty = o->presence_penalty;
    g.frequency_penalty = o->frequency_penalty;
    g.no_repeat_ngram_size = o->no_repeat_ngram_size;
    g.num_beams = o->num_beams;
    g.length_penalty = o->length_penalty;
    g.early_stopping = o->early_stopping == "true" ? 1 : o->early_stopping == "never" ? 2 : 0;
    g.num_return_sequences = o->num_return_sequences;
    g.seed = o->seed;
    g.ignore_eos = o->ignore_eos;
    if (!o->stop.empty()) {
      if (!tok) raise<ValueError>("generate: --stop needs the folder's tokenizer");
      g.should_stop = [&](int64_t, const std::vector<int64_t>& out) {
        std::string text = decode(out);
        for (const std::string& s : o->stop)
          if (text.find(s) != std::string::npos) return true;
        return false;
      };
    }
    if (o->stream) {
      g.on_token = [&](int64_t, int64_t t) {
        if (tok) std::fputs(tok->decode({uint32_t(t)}, false).c_str(), stdout);
        else std::printf("%lld ", (long long)t);
        std::fflush(stdout);
      };
    }
    models::GenerationResult r;
    if (!o->draft_model.empty()) {
      auto draft = models::load_pretrained(o->draft_model, load_options(o->dtype, o->quantize, o->kv_cache, o->quantized_prefill));
      r = models::generate_speculative(*model, *draft, prompt_ids, g, o->lookahead);
    } else {
      r = models::generate(*model, {prompt_ids}, g);
    }
    if (o->stream) std::printf("\n");
    for (size_t i = 0; i < r.tokens.size(); ++i) {
      if (!tok || o->stream) break;
      std::string text = decode(r.tokens[i]);
      for (const std::string& s : o->stop)  // the text ends before the stop string, as HF's stop_strings
        if (auto at = text.find(s); at != std::string::npos) text.resize(at);
      std::printf("%s\n", text.c_str());
    }
    std::fprintf(stderr,
                 "prefill: %lld tokens in %.3f s (%.1f tokens/s); decode: %lld steps in %.3f s (%.1f tokens/s); "
                 "%zu tokens generated on %d thread%s\n",
                 (long long)r.prefill_tokens, r.prefill_seconds, double(r.prefill_tokens) / std::max(r.prefill_seconds, 1e-9),
                 (long long)r.decode_steps, r.decode_seconds, double(r.decode_steps) / std::max(r.decode_seconds, 1e-9),
                 r.tokens[0].size(), get_num_threads(), get_num_threads() == 1 ? "" : "s");
    if (!o->draft_model.empty())
      std::fprintf(stderr, "speculative: %lld of %lld draft tokens accepted (%.1f%%)\n", (long long)r.draft_accepted,
                   (long long)r.draft_proposed, 100.0 * double(r.draft_accepted) / double(std::max<int64_t>(r.draft_proposed, 1)));
    if (o->print_ids || !tok) {
      if (r.tokens.size() == 1) {
        std::printf("%s\n", id_list_json(r.tokens[0]).c_str());
      } else {
        std::string all = "[";
        for (size_t i = 0; i < r.tokens.size(); ++i) all += (i ? ", " : "") + id_list_json(r.tokens[i]);
        std::printf("%s]\n", all.c_str());
      }
    }
  });
}

void add_forward(CLI::App& app) {
  auto model_dir = std::make_shared<std::string>(), inputs = std::make_shared<std::string>(),
       out = std::make_shared<std::string>(), dtype = std::make_shared<std::string>("float32"),
       adapter = std::make_shared<std::string>();
  auto merge = std::make_shared<bool>(false);
  auto output = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("forward", "logits (or hidden states) of a batch of token ids as a float32 .npy");
  cmd->add_option("--model", *model_dir, "Hugging Face model folder")->required();
  cmd->add_option("--inputs", *inputs,
                  "JSON {\"input_ids\": [[...]], \"attention_mask\": [[...]], \"token_type_ids\": [[...]], "
                  "\"decoder_input_ids\": [[...]] (encoder-decoder models)}")
      ->required();
  cmd->add_option("--output", *output,
                  "what to write: logits | last_hidden_state | pooler_output | encoder_last_hidden_state (default: "
                  "the head's logits, or last_hidden_state for a base encoder)")
      ->check(CLI::IsMember({"logits", "last_hidden_state", "pooler_output", "encoder_last_hidden_state"}));
  cmd->add_option("--out", *out, "output .npy")->required();
  cmd->add_option("--adapter", *adapter, "a LoRA adapter folder (PEFT layout) applied to the model");
  cmd->add_flag("--merge", *merge, "merge the adapter into the weights at load");
  cmd->add_option("--dtype", *dtype, "compute dtype: float32 (default) or native (the checkpoint's own)")
      ->check(CLI::IsMember({"float32", "native"}));
  add_threads_option(cmd);
  cmd->callback([=] {
    const models::ForwardInputs in = models::parse_forward_inputs(io::read_file(*inputs), *inputs);
    const Tensor& input = in.input_ids;
    const Tensor& m = in.attention_mask;
    if (models::is_encoder_folder(*model_dir)) {  // BERT / RoBERTa
      auto enc = models::load_encoder(*model_dir);
      models::EncoderOutput o = enc->encode(input, m, in.token_type_ids);
      const std::string what = !output->empty() ? *output : enc->head() == "base" ? "last_hidden_state" : "logits";
      const Tensor& t = what == "logits" ? o.logits : what == "pooler_output" ? o.pooler_output : o.last_hidden_state;
      if (!t.defined())
        raise<ValueError>("forward: {} ({}) has no {}", *model_dir, enc->config().architecture, what);
      io::save_npy(*out, t.contiguous());
      return;
    }
    if (in.token_type_ids.defined()) raise<ValueError>("forward: token_type_ids are for encoder models (BERT); {} is a decoder", *model_dir);
    auto model = load_model(*model_dir, load_options(*dtype), *adapter, *merge);
    if (auto* s2s = dynamic_cast<models::Seq2SeqLM*>(model.get())) {  // T5
      if (!in.decoder_input_ids.defined())
        raise<ValueError>("forward: {} is an encoder-decoder model: give decoder_input_ids in {}", *model_dir, *inputs);
      if (!output->empty() && *output != "logits" && *output != "encoder_last_hidden_state")
        raise<ValueError>("forward: --output {} is not an output of {} (logits, encoder_last_hidden_state)", *output,
                          model->config().architecture);
      autograd::NoGradGuard no_grad;
      models::Seq2SeqOutput o = s2s->seq2seq(input, m, in.decoder_input_ids);
      return io::save_npy(*out, (*output == "encoder_last_hidden_state" ? o.encoder_last_hidden_state : o.logits).contiguous());
    }
    if (in.decoder_input_ids.defined()) raise<ValueError>("forward: decoder_input_ids are for encoder-decoder models; {} is a decoder", *model_dir);
    if (!output->empty() && *output != "logits" && *output != "last_hidden_state")
      raise<ValueError>("forward: --output {} is for encoder models", *output);
    for (int64_t t : input.to_vector<int64_t>())
      if (t < 0 || t >= model->config().vocab_size)
        raise<ValueError>("forward: token id {} is outside the vocabulary (size {})", t, model->config().vocab_size);
    if (*output == "last_hidden_state") return io::save_npy(*out, model->hidden_states(input, m).contiguous());
    autograd::NoGradGuard no_grad;  // inference: the blocks' fast paths
    Tensor logits = model->forward(input, m);
    io::save_npy(*out, logits.contiguous());
  });
}

void add_info(CLI::App& app) {
  auto model_dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("info", "architecture, parameter count, dtypes and memory of a model folder");
  cmd->add_option("--model", *model_dir, "Hugging Face model folder")->required();
  cmd->callback([=] {
    auto model = models::load_pretrained(*model_dir, {.dtype = std::nullopt});
    const models::ModelConfig& c = model->config();
    std::map<std::string, int64_t> by_dtype;
    int64_t bytes = 0;
    for (const auto& [name, w] : model->stored_weights()) {  // a GGUF's quantized matrices by their format
      by_dtype[w.kind] += w.numel;
      bytes += w.bytes;
    }
    std::printf("architecture: %s (model_type %s)\n", c.architecture.c_str(), c.model_type.c_str());
    std::printf("layers %lld, hidden %lld, heads %lld (kv %lld, head_dim %lld), intermediate %lld, vocab %lld, "
                "positions %lld\n",
                (long long)c.num_layers, (long long)c.hidden_size, (long long)c.num_heads, (long long)c.num_kv_heads,
                (long long)c.head_dim, (long long)c.intermediate_size, (long long)c.vocab_size,
                (long long)c.max_positions);
    std::printf("parameters: %lld\n", (long long)model->num_parameters());
    for (const auto& [dt, n] : by_dtype) std::printf("  %s: %lld\n", dt.c_str(), (long long)n);
    if (model->recurrent()) {  // state that does not grow per token (RWKV, Mamba), or an encoder's (T5)
      autograd::NoGradGuard no_grad;
      models::KVCache cache = model->make_cache(1, 2);
      model->forward(tensor<int64_t>({0}, {1, 1}), Tensor(), &cache, 1);
      std::printf("memory: weights %.1f MiB (memory-mapped where the dtype is used as stored); generation cache "
                  "after one token %.1f KiB per sequence (recurrent state or encoder output: see docs/models.md)\n",
                  double(bytes) / (1 << 20), double(cache.nbytes()) / 1024);
      return;
    }
    const double kv_per_token = 2.0 * double(c.num_layers * c.num_kv_heads * c.head_dim) * double(itemsize(model->dtype()));
    std::printf("memory: weights %.1f MiB (memory-mapped where the dtype is used as stored); %s KV cache "
                "%.1f KiB per token\n",
                double(bytes) / (1 << 20), std::string(dtype_name(model->dtype())).c_str(), kv_per_token / 1024);
  });
}

void add_convert(CLI::App& app) {
  auto dir = std::make_shared<std::string>(), out = std::make_shared<std::string>(),
       type = std::make_shared<std::string>("f16");
  CLI::App* cmd = app.add_subcommand("convert", "write an HF Llama/Mistral folder as a llama.cpp GGUF file");
  cmd->add_option("--model", *dir, "Hugging Face model folder")->required();
  cmd->add_option("--to", *out, "output .gguf")->required();
  cmd->add_option("--type", *type,
                  "matrix type: f32, f16 (default), bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K or q6_K "
                  "(norms stay f32; K-quant rows that are not whole 256-blocks fall back as llama.cpp does)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"},
                            CLI::ignore_case));
  cmd->callback([=] {
    models::convert_to_gguf(*dir, *out, *type);
    std::printf("wrote %s\n", out->c_str());
  });
}

void add_perplexity(CLI::App& app) {
  struct Options {
    std::string model, data, tokenizer, quantize, quantized_prefill = "auto", adapter;
    bool merge = false;
    int64_t context = 128, max_tokens = 0;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("perplexity", "perplexity of a model on a text file (windows of --context tokens)");
  cmd->add_option("--model", o->model, "HF model folder, GGUF file or quantized folder")->required();
  cmd->add_option("--data", o->data, "text file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--tokenizer", o->tokenizer, "\"byte\" (ids = UTF-8 bytes) or a tokenizer file (default: the model's)");
  cmd->add_option("--quantize", o->quantize, "compute with weights quantized to this format (as generate --quantize)");
  cmd->add_option("--adapter", o->adapter, "a LoRA adapter folder (PEFT layout) applied to the model");
  cmd->add_flag("--merge", o->merge, "merge the adapter into the weights at load");
  cmd->add_option("--quantized-prefill", o->quantized_prefill, "auto, integer, float32 or bfloat16 (as generate)")
      ->check(CLI::IsMember({"auto", "integer", "float32", "bfloat16"}));
  cmd->add_option("--context", o->context, "tokens per window (default 128)");
  cmd->add_option("--max-tokens", o->max_tokens, "score only the first N tokens of the file (0: all)")
      ->check(count_or_zero("token count", "all"));
  add_threads_option(cmd);
  cmd->callback([o] {
    auto model = load_model(o->model, load_options("float32", o->quantize, "", o->quantized_prefill), o->adapter, o->merge);
    const std::string text = io::read_file(o->data);
    std::vector<int64_t> ids;
    if (o->tokenizer == "byte") {
      for (unsigned char ch : text) ids.push_back(ch);
    } else {
      std::unique_ptr<text::Tokenizer> tok = o->tokenizer.empty()
                                                 ? models::folder_tokenizer(o->model)
                                                 : std::make_unique<text::Tokenizer>(text::Tokenizer::from_file(o->tokenizer));
      if (!tok) raise<ValueError>("perplexity: {} has no tokenizer; pass --tokenizer", o->model);
      for (uint32_t id : tok->encode_ids(text, false)) ids.push_back(id);
    }
    const models::PerplexityResult r = models::perplexity(*model, ids, o->context, o->max_tokens);
    std::printf("perplexity %.4f (mean NLL %.5f) over %lld tokens in %lld windows of %lld; %.1f s\n", r.perplexity,
                r.mean_nll, static_cast<long long>(r.tokens_scored), static_cast<long long>(r.windows),
                static_cast<long long>(o->context), r.seconds);
  });
}

void add_quantize(CLI::App& app) {
  auto dir = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  auto o = std::make_shared<models::QuantizeFolderOptions>();
  auto asymmetric = std::make_shared<bool>(false), single_quant = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "quantize", "write an HF folder with its linear weights quantized (nf4 / int8: bitsandbytes' layout; int4)");
  cmd->add_option("--model", *dir, "Hugging Face model folder")->required();
  cmd->add_option("--out", *out, "output folder")->required();
  cmd->add_option("--type", o->type, "nf4, int8 or int4")->required()->check(CLI::IsMember({"nf4", "int8", "int4"}));
  cmd->add_option("--group-size", o->group_size, "int4 group size (32, 64 or 128; default 128)")
      ->check(CLI::IsMember({32, 64, 128}));
  cmd->add_flag("--asymmetric", *asymmetric, "int4 with a zero point per group (levels 0..15)");
  cmd->add_flag("--no-double-quant", *single_quant, "nf4: keep the block maxima in float32");
  cmd->callback([=] {
    models::QuantizeFolderOptions opts = *o;
    opts.symmetric = !*asymmetric;
    opts.double_quant = !*single_quant;
    const int64_t n = models::quantize_folder(*dir, *out, opts);
    std::printf("quantized %lld weights to %s in %s\n", static_cast<long long>(n), opts.type.c_str(), out->c_str());
  });
}

}  // namespace

void add_generate_commands(CLI::App& app) {
  add_generate(app);
  add_forward(app);
  add_info(app);
  add_convert(app);
  add_quantize(app);
  add_perplexity(app);
}

}  // namespace foundry::cli
