// The OpenAI-compatible HTTP layer over serve::Engine: /v1/models, /v1/completions,
// /v1/chat/completions (server-sent events when streaming), /health, /metrics (Prometheus),
// /tokenize, /detokenize, /apply-template; API keys, body limits and OpenAI's error shape.
#include "foundry/serve/server.h"

#include "foundry/serve/json_schema.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>

#include <nlohmann/json.hpp>

#include "foundry/core/error.h"
#include "foundry/io/json_depth.h"
#include "foundry/models/chat_template.h"
#include "foundry/models/pretrained.h"
#include "foundry/ops/ops.h"
#include "text/base64.h"
#include "foundry/text/tokenizer.h"

namespace foundry::serve {

namespace {

using json = nlohmann::ordered_json;

// A client-visible error: an HTTP status and OpenAI's {"error": {...}} body.
struct ApiError : std::runtime_error {
  int status;
  std::string type, param, code;
  ApiError(int s, const std::string& message, std::string p = "", std::string c = "", std::string t = "invalid_request_error")
      : std::runtime_error(message), status(s), type(std::move(t)), param(std::move(p)), code(std::move(c)) {}
};

json error_body(const std::string& message, const std::string& type, const std::string& param, const std::string& code) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

void send_json(httplib::Response& res, const json& j, int status = 200) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), uint32_t(rng()));
}

// ---- request parameters, checked with OpenAI's names ----------------------------------------------

template <class T>
std::optional<T> get_opt(const json& body, const char* key) {
  if (!body.contains(key) || body[key].is_null()) return std::nullopt;
  const json& v = body[key];
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) throw ApiError(400, fmt::format("'{}' must be a boolean", key), key);
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_number_integer()) throw ApiError(400, fmt::format("'{}' must be an integer", key), key);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) throw ApiError(400, fmt::format("'{}' must be a number", key), key);
  } else {
    if (!v.is_string()) throw ApiError(400, fmt::format("'{}' must be a string", key), key);
  }
  return v.get<T>();
}

template <class T>
T in_range(std::optional<T> v, T dflt, T lo, T hi, const char* key) {
  const T x = v.value_or(dflt);
  if (x < lo || x > hi) throw ApiError(400, fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, x), key);
  return x;
}

struct Params {
  models::GenerationConfig sampling;
  std::vector<std::string> stop;
  int64_t n = 1, logprobs = 0;
  bool want_logprobs = false, echo = false, stream = false, include_usage = false;
  std::optional<int64_t> max_tokens;
  std::string json_schema;  ///< response_format: the schema the output must match ("" none)
};

// Constrained decoding: a token may come next when its text keeps the output a valid beginning of
// a document of the schema (its text read in the context of the tokens before it, as decoding
// joins them); end-of-text only once the document is complete.
class JsonConstraint : public TokenConstraint {
 public:
  JsonConstraint(const std::string& schema, const text::Tokenizer& tok, std::vector<int64_t> eos)
      : matcher_(schema), tok_(tok), eos_(std::move(eos)) {}
  bool allows(int64_t token) override {
    if (std::find(eos_.begin(), eos_.end(), token) != eos_.end()) return matcher_.complete();
    const std::string text = piece(token);
    return !text.empty() && matcher_.accepts(text);
  }
  void accept(int64_t token) override {
    if (std::find(eos_.begin(), eos_.end(), token) == eos_.end()) matcher_.feed(piece(token));
    tail_.push_back(token);
    if (tail_.size() > 4) tail_.erase(tail_.begin());
    tail_text_ = tok_.decode(std::vector<uint32_t>(tail_.begin(), tail_.end()), true);
  }
  bool complete() const override { return matcher_.complete(); }

 private:
  // The token's text after the last few accepted ones (decoding joins tokens, e.g. SentencePiece's
  // leading space), the same for every candidate of a step but the last token.
  std::string piece(int64_t token) const {
    std::vector<uint32_t> ids(tail_.begin(), tail_.end());
    ids.push_back(uint32_t(token));
    const std::string after = tok_.decode(ids, true);
    if (after.compare(0, tail_text_.size(), tail_text_) != 0) return tok_.decode({uint32_t(token)}, true);
    return after.substr(tail_text_.size());
  }
  JsonMatcher matcher_;
  const text::Tokenizer& tok_;
  std::vector<int64_t> eos_, tail_;
  std::string tail_text_;  // tail_ decoded
};

Params parse_params(const json& b, bool chat) {
  Params p;
  p.sampling.temperature = in_range<double>(get_opt<double>(b, "temperature"), 1.0, 0.0, 2.0, "temperature");
  p.sampling.do_sample = p.sampling.temperature > 0;
  p.sampling.top_p = in_range<double>(get_opt<double>(b, "top_p"), 1.0, 0.0, 1.0, "top_p");
  if (p.sampling.top_p <= 0) throw ApiError(400, "'top_p' must be greater than 0", "top_p");
  p.sampling.top_k = in_range<int64_t>(get_opt<int64_t>(b, "top_k"), 0, -1, 1 << 30, "top_k");
  if (p.sampling.top_k < 0) p.sampling.top_k = 0;  // llama.cpp / vLLM: -1 disables
  p.sampling.min_p = in_range<double>(get_opt<double>(b, "min_p"), 0.0, 0.0, 1.0, "min_p");
  p.sampling.presence_penalty = in_range<double>(get_opt<double>(b, "presence_penalty"), 0.0, -2.0, 2.0, "presence_penalty");
  p.sampling.frequency_penalty = in_range<double>(get_opt<double>(b, "frequency_penalty"), 0.0, -2.0, 2.0, "frequency_penalty");
  p.sampling.repetition_penalty = in_range<double>(get_opt<double>(b, "repetition_penalty"), 1.0, 1e-6, 100.0, "repetition_penalty");
  p.sampling.ignore_eos = get_opt<bool>(b, "ignore_eos").value_or(false);
  if (auto seed = get_opt<int64_t>(b, "seed")) p.sampling.seed = uint64_t(*seed);
  else p.sampling.seed = std::random_device{}();
  p.n = in_range<int64_t>(get_opt<int64_t>(b, "n"), 1, 1, 16, "n");
  p.stream = get_opt<bool>(b, "stream").value_or(false);
  if (b.contains("stream_options") && !b["stream_options"].is_null()) {
    if (!b["stream_options"].is_object()) throw ApiError(400, "'stream_options' must be an object", "stream_options");
    p.include_usage = get_opt<bool>(b["stream_options"], "include_usage").value_or(false);
  }
  const char* max_key = chat && b.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (auto m = get_opt<int64_t>(b, max_key)) {
    if (*m < 1) throw ApiError(400, fmt::format("'{}' must be at least 1", max_key), max_key);
    p.max_tokens = *m;
  } else if (!chat) {
    p.max_tokens = 16;  // OpenAI's default for completions
  }
  if (b.contains("stop") && !b["stop"].is_null()) {
    const json& s = b["stop"];
    if (s.is_string()) p.stop = {s.get<std::string>()};
    else if (s.is_array() && s.size() <= 4 && std::all_of(s.begin(), s.end(), [](const json& x) { return x.is_string(); }))
      p.stop = s.get<std::vector<std::string>>();
    else throw ApiError(400, "'stop' must be a string or a list of up to 4 strings", "stop");
    p.stop.erase(std::remove(p.stop.begin(), p.stop.end(), std::string()), p.stop.end());
  }
  if (chat) {
    p.want_logprobs = get_opt<bool>(b, "logprobs").value_or(false);
    p.logprobs = in_range<int64_t>(get_opt<int64_t>(b, "top_logprobs"), 0, 0, 20, "top_logprobs");
    if (p.logprobs > 0 && !p.want_logprobs) throw ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs");
  } else {
    if (auto lp = get_opt<int64_t>(b, "logprobs")) p.want_logprobs = true, p.logprobs = in_range<int64_t>(lp, 0, 0, 5, "logprobs");
    p.echo = get_opt<bool>(b, "echo").value_or(false);
  }
  if (b.contains("response_format") && !b["response_format"].is_null()) {
    const json& rf = b["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      throw ApiError(400, "'response_format' must be an object with a 'type'", "response_format");
    const std::string type = rf["type"].get<std::string>();
    if (type == "json_object") {
      p.json_schema = R"({"type": "object"})";
    } else if (type == "json_schema") {
      if (!rf.contains("json_schema") || !rf["json_schema"].is_object() || !rf["json_schema"].contains("schema"))
        throw ApiError(400, "response_format json_schema needs {\"json_schema\": {\"name\", \"schema\"}}", "response_format");
      p.json_schema = rf["json_schema"]["schema"].dump();
    } else if (type != "text") {
      throw ApiError(400, fmt::format("response_format type '{}' is not one of text, json_object, json_schema", type),
                     "response_format");
    }
    if (!p.json_schema.empty()) {
      try {
        JsonMatcher check(p.json_schema);
      } catch (const ValueError& e) {
        throw ApiError(400, e.what(), "response_format");
      }
    }
  }
  return p;
}

// ---- one running choice ------------------------------------------------------------------------------

// What the engine thread reports for one choice; the HTTP thread waits on it.
struct Job {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<TokenEvent> events;
  std::vector<int64_t> ids;
  std::string text;          // the decoded generation, cut at a stop string
  bool stopped_by_string = false, done = false;
  std::string reason;
  int64_t prompt_tokens = 0, cached_tokens = 0, id = -1;
  std::atomic<bool> client_gone{false};
};

// The decoded text of `ids` and whether a stop string ended it (the text then ends before it).
std::pair<std::string, bool> decode_until_stop(const text::Tokenizer& tok, const std::vector<int64_t>& ids,
                                               const std::vector<std::string>& stop) {
  std::string text = tok.decode(std::vector<uint32_t>(ids.begin(), ids.end()), true);
  size_t cut = std::string::npos;
  for (const std::string& s : stop) cut = std::min(cut, text.find(s));
  if (cut != std::string::npos) return {text.substr(0, cut), true};
  return {text, false};
}

// How much of `text` is safe to stream: no half UTF-8 character at the end, and no tail that could
// still become a stop string.
size_t streamable(const std::string& text, const std::vector<std::string>& stop, bool final) {
  if (final) return text.size();
  size_t n = text::settled_text_length(text);
  for (const std::string& s : stop)
    for (size_t k = std::min(s.size() - 1, n); k > 0; --k)
      if (text.compare(n - k, k, s, 0, k) == 0) {
        n -= k;
        break;
      }
  return n;
}

}  // namespace

struct Server::Impl {
  Engine& engine;
  const text::Tokenizer& tok;
  ServerOptions opt;
  models::ChatTemplate chat;
  httplib::Server http;
  std::atomic<int64_t> http_requests{0}, http_errors{0};

  Impl(Engine& e, const text::Tokenizer& t, ServerOptions o)
      : engine(e), tok(t), opt(std::move(o)), chat(opt.chat_template.empty() ? models::kChatMlTemplate : opt.chat_template) {}

  std::string token_text(int64_t id) const { return tok.decode({uint32_t(id)}, false); }

  std::vector<int64_t> encode(const std::string& s, bool special) const {
    std::vector<uint32_t> ids = tok.encode_ids(s, special);
    return {ids.begin(), ids.end()};
  }

  std::shared_ptr<Job> submit(const std::vector<int64_t>& prompt, const Params& p, int64_t index) {
    auto job = std::make_shared<Job>();
    Request r;
    r.prompt = prompt;
    r.sampling = p.sampling;
    r.sampling.seed = p.sampling.seed + uint64_t(index);
    const int64_t room = engine.ctx_size() - int64_t(prompt.size());
    r.sampling.max_new_tokens = std::min(p.max_tokens.value_or(room), room);
    if (!p.json_schema.empty())
      r.constraint = std::make_shared<JsonConstraint>(p.json_schema, tok, engine.model().config().eos_token_ids);
    r.logprobs = p.want_logprobs;
    r.top_logprobs = p.logprobs;
    const std::vector<std::string> stop = p.stop;
    const text::Tokenizer* t = &tok;
    r.on_token = [job](const TokenEvent& e) {
      std::lock_guard<std::mutex> lock(job->mu);
      job->events.push_back(e);
      job->ids.push_back(e.token);
      job->cv.notify_all();
      return !job->client_gone.load();
    };
    r.should_stop = [job, stop, t](const std::vector<int64_t>& ids) {
      if (stop.empty()) return false;
      auto [text, hit] = decode_until_stop(*t, ids, stop);
      return hit;
    };
    r.on_finish = [job](const std::string& reason, int64_t prompt_tokens, int64_t cached) {
      std::lock_guard<std::mutex> lock(job->mu);
      job->reason = reason;
      job->prompt_tokens = prompt_tokens;
      job->cached_tokens = cached;
      job->done = true;
      job->cv.notify_all();
    };
    if (prompt.size() + 1 > size_t(engine.ctx_size()))
      throw ApiError(400,
                     fmt::format("This model's maximum context length is {} tokens. However, your prompt has {} tokens "
                                 "(one more is needed to generate).",
                                 engine.ctx_size(), prompt.size()),
                     "messages", "context_length_exceeded");
    try {
      job->id = engine.submit(std::move(r));
    } catch (const ValueError& e) {
      throw ApiError(400, e.what(), "prompt");
    }
    if (job->id < 0) throw ApiError(429, "the server's queue is full; retry later", "", "rate_limit_exceeded", "rate_limit_error");
    return job;
  }

  // Waits until every job is done (or the timeout cancels them).
  void wait_all(const std::vector<std::shared_ptr<Job>>& jobs) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opt.request_timeout_s);
    for (const auto& j : jobs) {
      std::unique_lock<std::mutex> lock(j->mu);
      if (!j->cv.wait_until(lock, deadline, [&] { return j->done; })) {
        lock.unlock();
        engine.cancel(j->id);
        lock.lock();
        j->cv.wait(lock, [&] { return j->done; });
      }
    }
  }

  static std::string finish_reason(const Job& j) {
    if (j.reason == "stop" || j.reason == "length") return j.reason;
    if (j.reason == "cancelled") return "stop";
    return "error";
  }

  json usage(const std::vector<std::shared_ptr<Job>>& jobs) const {
    int64_t completion = 0;
    for (const auto& j : jobs) completion += int64_t(j->ids.size());
    const int64_t prompt = jobs.empty() ? 0 : jobs[0]->prompt_tokens;
    return {{"prompt_tokens", prompt},
            {"completion_tokens", completion},
            {"total_tokens", prompt + completion},
            {"prompt_tokens_details", {{"cached_tokens", jobs.empty() ? 0 : jobs[0]->cached_tokens}}}};
  }

  // ---- prompts ---------------------------------------------------------------------------------------

  // /v1/completions' prompt: a string, a list of ids, or a list of either.
  std::vector<std::vector<int64_t>> completion_prompts(const json& body, std::vector<std::string>* texts) const {
    if (!body.contains("prompt")) throw ApiError(400, "'prompt' is required", "prompt");
    const json& p = body["prompt"];
    std::vector<std::vector<int64_t>> out;
    auto one = [&](const json& x) {
      if (x.is_string()) {
        out.push_back(encode(x.get<std::string>(), true));  // as foundry generate --prompt: with BOS
        texts->push_back(x.get<std::string>());
      } else if (x.is_array() && !x.empty() && std::all_of(x.begin(), x.end(), [](const json& v) { return v.is_number_integer(); })) {
        out.push_back(x.get<std::vector<int64_t>>());
        for (int64_t id : out.back())
          if (id < 0 || id >= int64_t(tok.vocab_size()))
            throw ApiError(400, fmt::format("prompt token id {} is outside the vocabulary ({})", id, tok.vocab_size()), "prompt");
        texts->push_back(tok.decode(std::vector<uint32_t>(out.back().begin(), out.back().end()), false));
      } else {
        throw ApiError(400, "'prompt' must be a string, a list of token ids, or a list of those", "prompt");
      }
    };
    if (p.is_string() || (p.is_array() && !p.empty() && p[0].is_number_integer())) one(p);
    else if (p.is_array() && !p.empty()) for (const json& x : p) one(x);
    else throw ApiError(400, "'prompt' must be a string, a list of token ids, or a list of those", "prompt");
    for (const auto& ids : out)
      if (ids.empty()) throw ApiError(400, "'prompt' encodes to no tokens", "prompt");
    return out;
  }

  std::string render_chat(const json& body) const {
    if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
      throw ApiError(400, "'messages' must be a non-empty list", "messages");
    json messages = json::array();
    for (const json& m : body["messages"]) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
        throw ApiError(400, "each message needs a string 'role'", "messages");
      const std::string role = m["role"].get<std::string>();
      if (role != "system" && role != "user" && role != "assistant" && role != "tool" && role != "developer")
        throw ApiError(400, fmt::format("unknown message role '{}'", role), "messages");
      json msg = m;
      if (m.contains("content") && m["content"].is_array()) {  // content parts: their text, joined
        std::string text;
        for (const json& part : m["content"]) {
          if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
            throw ApiError(400, "only text content parts are supported", "messages");
          text += part["text"].get<std::string>();
        }
        msg["content"] = text;
      } else if (m.contains("content") && !m["content"].is_string() && !m["content"].is_null()) {
        throw ApiError(400, "a message's 'content' must be a string or a list of text parts", "messages");
      } else if (!m.contains("content") || m["content"].is_null()) {
        msg["content"] = "";  // OpenAI's null content (an assistant turn that only called tools): no text
      }
      messages.push_back(msg);
    }
    try {
      return chat.apply(messages.dump(), true, opt.bos_token, opt.eos_token);
    } catch (const ValueError& e) {
      throw ApiError(400, std::string("the chat template failed: ") + e.what(), "messages");
    }
  }

  // ---- responses -------------------------------------------------------------------------------------

  json completion_logprobs(const Job& j, size_t text_start) const {
    json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
    size_t offset = text_start;
    for (const TokenEvent& e : j.events) {
      const std::string t = token_text(e.token);
      tokens.push_back(t);
      lps.push_back(e.logprob);
      json top = json::object();
      for (const auto& [id, lp] : e.top) top[token_text(id)] = lp;
      tops.push_back(top);
      offsets.push_back(offset);
      offset += t.size();
    }
    return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
  }

  json chat_logprobs(const std::vector<TokenEvent>& events) const {
    json content = json::array();
    for (const TokenEvent& e : events) {
      const std::string t = token_text(e.token);
      json top = json::array();
      for (const auto& [id, lp] : e.top) {
        const std::string s = token_text(id);
        top.push_back({{"token", s}, {"logprob", lp}, {"bytes", std::vector<int>(s.begin(), s.end())}});
      }
      content.push_back({{"token", t}, {"logprob", e.logprob}, {"bytes", std::vector<int>(t.begin(), t.end())}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }

  void handle_generation(const httplib::Request& req, httplib::Response& res, bool chat_api) {
    const json body = parse_body(req);
    check_model(body);
    const Params p = parse_params(body, chat_api);
    std::vector<std::vector<int64_t>> prompts;
    std::vector<std::string> prompt_texts;
    if (chat_api) {
      prompts.push_back(encode(render_chat(body), false));  // the template writes the special tokens
      prompt_texts.push_back("");
    } else {
      prompts = completion_prompts(body, &prompt_texts);
    }
    for (const auto& pr : prompts)
      if (int64_t(pr.size()) + 1 > engine.ctx_size())
        throw ApiError(400,
                       fmt::format("This model's maximum context length is {} tokens. However, your {} resulted in {} "
                                   "tokens.",
                                   engine.ctx_size(), chat_api ? "messages" : "prompt", pr.size()),
                       chat_api ? "messages" : "prompt", "context_length_exceeded");
    std::vector<std::shared_ptr<Job>> jobs;
    try {
      for (size_t pi = 0; pi < prompts.size(); ++pi)
        for (int64_t c = 0; c < p.n; ++c) jobs.push_back(submit(prompts[pi], p, int64_t(jobs.size())));
    } catch (...) {
      for (auto& j : jobs) j->client_gone = true, engine.cancel(j->id);
      throw;
    }
    const std::string id = random_id(chat_api ? "chatcmpl-" : "cmpl-");
    const int64_t created = int64_t(std::time(nullptr));
    if (p.stream) return stream(res, jobs, p, prompt_texts, chat_api, id, created);
    wait_all(jobs);
    json choices = json::array();
    for (size_t i = 0; i < jobs.size(); ++i) {
      Job& j = *jobs[i];
      // A schema no output satisfies (minLength above maxLength, say) is the request's fault.
      if (j.reason.find("no token satisfies the constraint") != std::string::npos)
        throw ApiError(400, "response_format: no output satisfies the schema (contradictory bounds such as "
                            "minLength above maxLength?)", "response_format");
      if (j.reason.rfind("error", 0) == 0) throw ApiError(500, j.reason, "", "", "server_error");
      auto [text, hit] = decode_until_stop(tok, j.ids, p.stop);
      json choice;
      choice["index"] = i;
      if (chat_api) {
        choice["message"] = {{"role", "assistant"}, {"content", text}};
        choice["logprobs"] = p.want_logprobs ? chat_logprobs(j.events) : json(nullptr);
      } else {
        const std::string& pt = prompt_texts[i / size_t(p.n)];
        choice["text"] = p.echo ? pt + text : text;
        choice["logprobs"] = p.want_logprobs ? completion_logprobs(j, p.echo ? pt.size() : 0) : json(nullptr);
      }
      choice["finish_reason"] = hit ? "stop" : finish_reason(j);
      choices.push_back(choice);
    }
    send_json(res, {{"id", id},
                    {"object", chat_api ? "chat.completion" : "text_completion"},
                    {"created", created},
                    {"model", opt.model_name},
                    {"choices", choices},
                    {"usage", usage(jobs)}});
  }

  void stream(httplib::Response& res, std::vector<std::shared_ptr<Job>> jobs, Params p, std::vector<std::string> prompt_texts,
              bool chat_api, std::string id, int64_t created) {
    res.set_header("Cache-Control", "no-cache");
    struct State {
      std::vector<size_t> sent, events_sent;
      std::vector<bool> finished, started;
      bool usage_sent = false;
    };
    auto st = std::make_shared<State>();
    st->sent.assign(jobs.size(), 0);
    st->events_sent.assign(jobs.size(), 0);
    st->finished.assign(jobs.size(), false);
    st->started.assign(jobs.size(), false);
    const std::string object = chat_api ? "chat.completion.chunk" : "text_completion";
    res.set_chunked_content_provider("text/event-stream", [this, jobs, p, prompt_texts, chat_api, id, created, st, object](
                                                              size_t, httplib::DataSink& sink) {
      auto cancel_all = [&] {
        for (auto& j : jobs) j->client_gone = true, engine.cancel(j->id);
      };
      auto send = [&](const json& chunk) {
        const std::string line = "data: " + chunk.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
        return sink.write(line.data(), line.size());
      };
      auto chunk_of = [&](json choices) {
        return json{{"id", id}, {"object", object}, {"created", created}, {"model", opt.model_name}, {"choices", choices}};
      };
      // Wait for news on any job (a short timeout also notices a vanished client).
      for (size_t i = 0; i < jobs.size(); ++i) {
        if (st->finished[i]) continue;
        std::unique_lock<std::mutex> lock(jobs[i]->mu);
        jobs[i]->cv.wait_for(lock, std::chrono::milliseconds(50),
                             [&] { return jobs[i]->done || jobs[i]->events.size() > st->events_sent[i]; });
        break;
      }
      if (!sink.is_writable()) return cancel_all(), false;
      for (size_t i = 0; i < jobs.size(); ++i) {
        if (st->finished[i]) continue;
        Job& j = *jobs[i];
        std::vector<int64_t> ids;
        std::vector<TokenEvent> events;
        bool done;
        {
          std::lock_guard<std::mutex> lock(j.mu);
          ids = j.ids;
          events.assign(j.events.begin() + std::ptrdiff_t(st->events_sent[i]), j.events.end());
          done = j.done;
        }
        st->events_sent[i] += events.size();
        auto [text, hit] = decode_until_stop(tok, ids, p.stop);
        const size_t upto = streamable(text, p.stop, done || hit);
        if (chat_api && !st->started[i]) {
          json delta = {{"role", "assistant"}, {"content", ""}};
          if (!send(chunk_of(json::array({{{"index", i}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}}}))))
            return cancel_all(), false;
          st->started[i] = true;
        }
        std::string piece = upto > st->sent[i] ? text.substr(st->sent[i], upto - st->sent[i]) : "";
        if (!chat_api && p.echo && st->sent[i] == 0 && !st->started[i]) piece = prompt_texts[i / size_t(p.n)] + piece;
        st->started[i] = true;
        if (!piece.empty() || (!events.empty() && p.want_logprobs)) {
          json choice = {{"index", i}};
          if (chat_api) {
            choice["delta"] = {{"content", piece}};
            choice["logprobs"] = p.want_logprobs ? chat_logprobs(events) : json(nullptr);
          } else {
            choice["text"] = piece;
            choice["logprobs"] = nullptr;
          }
          choice["finish_reason"] = nullptr;
          if (!send(chunk_of(json::array({choice})))) return cancel_all(), false;
          st->sent[i] = upto;
        }
        if (done) {
          if (j.reason.rfind("error", 0) == 0) {
            send(error_body(j.reason, "server_error", "", ""));
          }
          json choice = {{"index", i}};
          if (chat_api) choice["delta"] = json::object();
          else choice["text"] = "";
          choice["logprobs"] = nullptr;
          choice["finish_reason"] = hit ? "stop" : finish_reason(j);
          if (!send(chunk_of(json::array({choice})))) return cancel_all(), false;
          st->finished[i] = true;
        }
      }
      if (std::all_of(st->finished.begin(), st->finished.end(), [](bool f) { return f; })) {
        if (p.include_usage) {
          json last = chunk_of(json::array());
          last["usage"] = usage(jobs);
          send(last);
        }
        const std::string done_line = "data: [DONE]\n\n";
        sink.write(done_line.data(), done_line.size());
        sink.done();
      }
      return true;
    });
  }

  // /v1/embeddings: the mean of the final hidden states over the input's tokens, unit length.
  void handle_embeddings(const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req);
    check_model(body);
    if (!body.contains("input")) throw ApiError(400, "'input' is required", "input");
    const json& in = body["input"];
    std::vector<std::vector<int64_t>> inputs;
    auto one = [&](const json& x) {
      if (x.is_string()) inputs.push_back(encode(x.get<std::string>(), true));
      else if (x.is_array() && std::all_of(x.begin(), x.end(), [](const json& v) { return v.is_number_integer(); }))
        inputs.push_back(x.get<std::vector<int64_t>>());
      else throw ApiError(400, "'input' must be a string, a list of token ids, or a list of those", "input");
    };
    if (in.is_string() || (in.is_array() && !in.empty() && in[0].is_number_integer())) one(in);
    else if (in.is_array() && !in.empty()) for (const json& x : in) one(x);
    else throw ApiError(400, "'input' must be a string, a list of token ids, or a list of those", "input");
    const std::string format = get_opt<std::string>(body, "encoding_format").value_or("float");
    if (format != "float" && format != "base64") throw ApiError(400, "'encoding_format' must be float or base64", "encoding_format");
    const int64_t hidden = engine.model().config().hidden_size, vocab = engine.model().config().vocab_size;
    if (auto dims = get_opt<int64_t>(body, "dimensions"); dims && *dims != hidden)
      throw ApiError(400, fmt::format("this model's embeddings have {} dimensions", hidden), "dimensions");
    int64_t tokens = 0;
    for (const auto& ids : inputs) {
      if (ids.empty()) throw ApiError(400, "an input encodes to no tokens", "input");
      if (int64_t(ids.size()) > engine.ctx_size())
        throw ApiError(400, fmt::format("an input has {} tokens, more than the context of {}", ids.size(), engine.ctx_size()),
                       "input", "context_length_exceeded");
      for (int64_t id : ids)
        if (id < 0 || id >= vocab) throw ApiError(400, fmt::format("token id {} is outside the vocabulary", id), "input");
      tokens += int64_t(ids.size());
    }
    std::vector<std::vector<float>> vectors;
    engine.run_exclusive([&] {
      for (const auto& ids : inputs) {
        Tensor h = engine.model().hidden_states(tensor<int64_t>(ids, {1, int64_t(ids.size())})).contiguous();
        const float* p = h.data<float>();
        std::vector<float> v(size_t(hidden), 0.f);
        for (size_t t = 0; t < ids.size(); ++t)
          for (int64_t d = 0; d < hidden; ++d) v[size_t(d)] += p[int64_t(t) * hidden + d] / float(ids.size());
        double norm = 0;
        for (float x : v) norm += double(x) * x;
        const float inv = norm > 0 ? float(1 / std::sqrt(norm)) : 0.f;
        for (float& x : v) x *= inv;
        vectors.push_back(std::move(v));
      }
    });
    json data = json::array();
    for (size_t i = 0; i < vectors.size(); ++i) {
      json e = {{"object", "embedding"}, {"index", i}};
      if (format == "float") {
        e["embedding"] = vectors[i];
      } else {
        e["embedding"] = text::base64_encode(std::string(reinterpret_cast<const char*>(vectors[i].data()), vectors[i].size() * sizeof(float)));
      }
      data.push_back(e);
    }
    send_json(res, {{"object", "list"}, {"data", data}, {"model", opt.model_name},
                    {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}});
  }

  json parse_body(const httplib::Request& req) const {
    if (const int depth = io::json_depth(req.body); depth > io::kMaxJsonDepth)
      throw ApiError(400, fmt::format("the request body nests {} levels deep; at most {} are accepted", depth,
                                      io::kMaxJsonDepth));
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) throw ApiError(400, "the request body is not valid JSON");
    if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
    return body;
  }

  void check_model(const json& body) const {
    if (!body.contains("model") || body["model"].is_null()) return;
    if (!body["model"].is_string()) throw ApiError(400, "'model' must be a string", "model");
    if (body["model"].get<std::string>() != opt.model_name)
      throw ApiError(400, fmt::format("The model '{}' does not exist; this server serves '{}'", body["model"].get<std::string>(),
                                      opt.model_name),
                     "model", "model_not_found");
  }

  std::string metrics() const {
    const EngineStats s = engine.stats();
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help, double v) {
      out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, v);
    };
    metric("foundry_http_requests_total", "counter", "HTTP requests received", double(http_requests.load()));
    metric("foundry_requests_total", "counter", "generation requests accepted", double(s.requests_total));
    metric("foundry_requests_rejected_total", "counter", "generation requests refused because the queue was full",
           double(s.requests_rejected));
    metric("foundry_requests_running", "gauge", "sequences being generated", double(s.active));
    metric("foundry_queue_length", "gauge", "requests waiting for a slot", double(s.waiting));
    metric("foundry_prompt_tokens_total", "counter", "prompt tokens", double(s.prompt_tokens));
    metric("foundry_prompt_tokens_cached_total", "counter", "prompt tokens served from the prefix cache",
           double(s.cached_prompt_tokens));
    metric("foundry_generated_tokens_total", "counter", "generated tokens", double(s.generated_tokens));
    metric("foundry_decode_steps_total", "counter", "batched decode forwards", double(s.decode_steps));
    metric("foundry_tokens_per_second", "gauge", "generated tokens per second (last 5 s)", s.tokens_per_second);
    metric("foundry_kv_cache_blocks_total", "gauge", "KV cache blocks", double(s.kv_blocks_total));
    metric("foundry_kv_cache_blocks_used", "gauge", "KV cache blocks in use (sequences and prefix cache)",
           double(s.kv_blocks_used));
    metric("foundry_kv_cache_blocks_cached", "gauge", "KV cache blocks held by the prefix cache", double(s.kv_blocks_cached));
    metric("foundry_kv_cache_usage_ratio", "gauge", "share of KV cache blocks in use",
           s.kv_blocks_total ? double(s.kv_blocks_used) / double(s.kv_blocks_total) : 0.0);
    return out;
  }

  void routes() {
    auto guarded = [this](auto fn) {
      return [this, fn](const httplib::Request& req, httplib::Response& res) {
        ++http_requests;
        try {
          if (!opt.api_key.empty() && req.get_header_value("Authorization") != "Bearer " + opt.api_key)
            throw ApiError(401, "Incorrect or missing API key: send 'Authorization: Bearer KEY'", "", "invalid_api_key");
          fn(req, res);
        } catch (const ApiError& e) {
          ++http_errors;
          send_json(res, error_body(e.what(), e.type, e.param, e.code), e.status);
        } catch (const std::exception& e) {
          ++http_errors;
          send_json(res, error_body(e.what(), "server_error", "", ""), 500);
        }
      };
    };
    http.Get("/health", guarded([](const httplib::Request&, httplib::Response& res) { send_json(res, {{"status", "ok"}}); }));
    http.Get("/v1/models", guarded([this](const httplib::Request&, httplib::Response& res) {
               send_json(res, {{"object", "list"},
                               {"data", json::array({{{"id", opt.model_name},
                                                      {"object", "model"},
                                                      {"created", int64_t(std::time(nullptr))},
                                                      {"owned_by", "foundry"},
                                                      {"max_model_len", engine.ctx_size()}}})}});
             }));
    http.Post("/v1/completions", guarded([this](const httplib::Request& q, httplib::Response& r) { handle_generation(q, r, false); }));
    http.Post("/v1/chat/completions",
              guarded([this](const httplib::Request& q, httplib::Response& r) { handle_generation(q, r, true); }));
    http.Post("/v1/embeddings", guarded([this](const httplib::Request& q, httplib::Response& r) { handle_embeddings(q, r); }));
    http.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
               res.set_content(metrics(), "text/plain; version=0.0.4");
             }));
    http.Post("/tokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
                const json b = parse_body(req);
                const auto content = get_opt<std::string>(b, "content");
                if (!content) throw ApiError(400, "'content' (a string) is required", "content");
                const bool special = get_opt<bool>(b, "add_special").value_or(false);
                const bool pieces = get_opt<bool>(b, "with_pieces").value_or(false);
                json tokens = json::array();
                for (int64_t t : encode(*content, special)) {
                  if (pieces) tokens.push_back({{"id", t}, {"piece", token_text(t)}});
                  else tokens.push_back(t);
                }
                send_json(res, {{"tokens", tokens}});
              }));
    http.Post("/detokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
                const json b = parse_body(req);
                if (!b.contains("tokens") || !b["tokens"].is_array() ||
                    !std::all_of(b["tokens"].begin(), b["tokens"].end(), [](const json& x) { return x.is_number_integer(); }))
                  throw ApiError(400, "'tokens' must be a list of token ids", "tokens");
                std::vector<uint32_t> ids;
                for (const json& t : b["tokens"]) {
                  const int64_t v = t.get<int64_t>();
                  if (v < 0 || v >= int64_t(tok.vocab_size())) throw ApiError(400, fmt::format("token id {} is outside the vocabulary", v), "tokens");
                  ids.push_back(uint32_t(v));
                }
                send_json(res, {{"content", tok.decode(ids, false)}});
              }));
    http.Post("/apply-template", guarded([this](const httplib::Request& req, httplib::Response& res) {
                send_json(res, {{"prompt", render_chat(parse_body(req))}});
              }));
    // Errors httplib answers itself (413 body too large, 404 unknown path) in OpenAI's shape.
    http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      const std::string msg = res.status == 413 ? "the request body is larger than the server accepts"
                              : res.status == 404 ? "unknown endpoint"
                                                  : fmt::format("HTTP error {}", res.status);
      send_json(res, error_body(msg, "invalid_request_error", "", res.status == 413 ? "request_too_large" : ""), res.status);
    });
    http.set_payload_max_length(opt.max_body_bytes);
  }
};

Server::Server(Engine& engine, const text::Tokenizer& tokenizer, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, tokenizer, std::move(options))) {
  FOUNDRY_CHECK_AS(ValueError, impl_->opt.request_timeout_s > 0, "serve: --timeout must be a positive number of seconds, got {}",
                   impl_->opt.request_timeout_s);  // NaN too: a deadline of NaN seconds
  const size_t threads = size_t(std::max<int64_t>(8, engine.options().parallel * 2 + 4));
  impl_->http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  impl_->routes();
}

Server::~Server() = default;

void Server::run(const std::function<void(const std::string&, int)>& on_ready) {
  int port = impl_->opt.port;
  if (port == 0) port = impl_->http.bind_to_any_port(impl_->opt.host);
  else if (!impl_->http.bind_to_port(impl_->opt.host, port)) port = -1;
  if (port < 0) raise<IOError>("serve: cannot listen on {}:{}", impl_->opt.host, impl_->opt.port);
  if (on_ready) on_ready(impl_->opt.host, port);
  impl_->http.listen_after_bind();
}

void Server::stop() { impl_->http.stop(); }

}  // namespace foundry::serve
