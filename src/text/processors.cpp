// Post-processors (HF processors/*.rs): TemplateProcessing, BertProcessing, RobertaProcessing,
// ByteLevel (offset trimming), Sequence.
#include <sstream>

#include "text/components.h"
#include "text/numbers.h"

namespace foundry::text {
namespace {

// HF byte_level::process_offsets: trims the offsets of leading/trailing spaces ('Ġ' or real
// whitespace) in each token, on char offsets and byte offsets alike.
void trim_offsets(Encoding& e, bool add_prefix_space) {
  static const char32_t kSpaceChar = 0x120;  // 'Ġ', byte-level ' '
  for (size_t i = 0; i < e.tokens.size(); ++i) {
    std::u32string chars = uni::to_u32(e.tokens[i]);
    size_t lead = 0, trail = 0, lead_bytes = 0, trail_bytes = 0;
    auto is_sp = [](char32_t c) { return c == kSpaceChar || uni::is_whitespace(c); };
    auto byte_w = [](char32_t c) -> size_t { return c == kSpaceChar ? 1 : uni::cp_len(c); };
    while (lead < chars.size() && is_sp(chars[lead])) lead_bytes += byte_w(chars[lead++]);
    while (trail < chars.size() && is_sp(chars[chars.size() - 1 - trail])) trail_bytes += byte_w(chars[chars.size() - 1 - trail++]);
    if (lead == 0 && trail == 0) continue;
    auto& o = e.offsets[i];
    auto& b = e.byte_offsets[i];
    if (lead > 0) {
      bool is_first = i == 0 || o.first == 0;
      if (is_first && add_prefix_space && lead == 1) {
        lead = 0;
        lead_bytes = 0;
      }
      o.first = std::min(o.first + lead, o.second);
      b.first = std::min(b.first + lead_bytes, b.second);
    }
    if (trail > 0 && o.second >= trail) o.second = std::max(o.second - trail, o.first);
    if (trail > 0 && b.second >= trail_bytes) b.second = std::max(b.second - trail_bytes, b.first);
  }
}

class ByteLevelProc final : public PostProcessor {
 public:
  ByteLevelProc(bool add_prefix_space, bool trim, bool use_regex)
      : add_prefix_space_(add_prefix_space), trim_(trim), use_regex_(use_regex) {}
  size_t added_tokens(bool) const override { return 0; }
  void process_encodings(std::vector<Encoding>& encs, bool) const override {
    if (trim_) {
      for (auto& e : encs) {
        trim_offsets(e, add_prefix_space_);
        for (auto& o : e.overflowing) trim_offsets(o, add_prefix_space_);
      }
    }
    for (size_t i = 0; i < encs.size(); ++i) encoding_set_sequence_id(encs[i], static_cast<int32_t>(i));
  }
  json to_json() const override {
    return json{{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space_}, {"trim_offsets", trim_},
                {"use_regex", use_regex_}};
  }

 private:
  bool add_prefix_space_, trim_, use_regex_;
};

struct Piece {
  bool is_sequence;
  std::string id;  // "A"/"B" or special token name
  uint32_t type_id;
};
struct SpecialTok {
  std::string id;
  std::vector<uint32_t> ids;
  std::vector<std::string> tokens;
};

class Template : public PostProcessor {
 public:
  Template(std::vector<Piece> single, std::vector<Piece> pair, std::vector<SpecialTok> specials)
      : single_(std::move(single)), pair_(std::move(pair)), specials_(std::move(specials)) {
    for (auto* t : {&single_, &pair_})
      for (auto& p : *t)
        if (!p.is_sequence && !find(p.id))
          raise<ValueError>("tokenizer.json: TemplateProcessing uses special token '{}' without defining it", p.id);
  }
  size_t added_tokens(bool is_pair) const override {
    size_t n = 0;
    for (auto& p : is_pair ? pair_ : single_)
      if (!p.is_sequence) n += find(p.id)->ids.size();
    return n;
  }
  void process_encodings(std::vector<Encoding>& encs, bool add_special) const override {
    const auto& tpl = encs.size() == 2 ? pair_ : single_;
    std::vector<Encoding> out;
    for (auto& p : tpl) {
      if (p.is_sequence) {
        size_t i = p.id == "A" ? 0 : 1;
        if (i >= encs.size()) continue;
        Encoding e = encs[i];
        e.type_ids.assign(e.ids.size(), p.type_id);
        encoding_set_sequence_id(e, static_cast<int32_t>(i));
        out.push_back(std::move(e));
      } else if (add_special) {
        const SpecialTok* t = find(p.id);
        Encoding e;
        size_t n = t->ids.size();
        e.ids = t->ids;
        e.tokens = t->tokens;
        e.type_ids.assign(n, p.type_id);
        e.word_ids.assign(n, -1);
        e.sequence_ids.assign(n, -1);
        e.offsets.assign(n, Span{0, 0});
        e.byte_offsets.assign(n, Span{0, 0});
        e.special_tokens_mask.assign(n, 1);
        e.attention_mask.assign(n, 1);
        out.push_back(std::move(e));
      }
    }
    encs = std::move(out);
  }
  json to_json() const override {
    auto tpl = [](const std::vector<Piece>& t) {
      json arr = json::array();
      for (auto& p : t) {
        if (p.is_sequence)
          arr.push_back(json{{"Sequence", json{{"id", p.id}, {"type_id", p.type_id}}}});
        else
          arr.push_back(json{{"SpecialToken", json{{"id", p.id}, {"type_id", p.type_id}}}});
      }
      return arr;
    };
    json sp = json::object();
    for (auto& s : specials_) sp[s.id] = json{{"id", s.id}, {"ids", s.ids}, {"tokens", s.tokens}};
    return json{{"type", "TemplateProcessing"}, {"single", tpl(single_)}, {"pair", tpl(pair_)}, {"special_tokens", sp}};
  }

 protected:
  const SpecialTok* find(const std::string& id) const {
    for (auto& s : specials_)
      if (s.id == id) return &s;
    return nullptr;
  }
  std::vector<Piece> single_, pair_;
  std::vector<SpecialTok> specials_;
};

class BertProc final : public Template {
 public:
  BertProc(std::string sep, uint32_t sep_id, std::string cls, uint32_t cls_id)
      : Template({{false, cls, 0}, {true, "A", 0}, {false, sep, 0}},
                 {{false, cls, 0}, {true, "A", 0}, {false, sep, 0}, {true, "B", 1}, {false, sep, 1}},
                 {{cls, {cls_id}, {cls}}, {sep, {sep_id}, {sep}}}),
        sep_(sep), cls_(cls), sep_id_(sep_id), cls_id_(cls_id) {}
  json to_json() const override {
    return json{{"type", "BertProcessing"}, {"sep", json::array({sep_, sep_id_})}, {"cls", json::array({cls_, cls_id_})}};
  }

 private:
  std::string sep_, cls_;
  uint32_t sep_id_, cls_id_;
};

class RobertaProc final : public Template {
 public:
  RobertaProc(std::string sep, uint32_t sep_id, std::string cls, uint32_t cls_id, bool trim, bool add_prefix_space)
      : Template({{false, cls, 0}, {true, "A", 0}, {false, sep, 0}},
                 {{false, cls, 0}, {true, "A", 0}, {false, sep, 0}, {false, sep, 0}, {true, "B", 0}, {false, sep, 0}},
                 {{cls, {cls_id}, {cls}}, {sep, {sep_id}, {sep}}}),
        sep_(sep), cls_(cls), sep_id_(sep_id), cls_id_(cls_id), trim_(trim), add_prefix_space_(add_prefix_space) {}
  void process_encodings(std::vector<Encoding>& encs, bool add_special) const override {
    if (trim_) {
      for (auto& e : encs) {
        trim_offsets(e, add_prefix_space_);
        for (auto& o : e.overflowing) trim_offsets(o, add_prefix_space_);
      }
    }
    Template::process_encodings(encs, add_special);
  }
  json to_json() const override {
    return json{{"type", "RobertaProcessing"}, {"sep", json::array({sep_, sep_id_})}, {"cls", json::array({cls_, cls_id_})},
                {"trim_offsets", trim_}, {"add_prefix_space", add_prefix_space_}};
  }

 private:
  std::string sep_, cls_;
  uint32_t sep_id_, cls_id_;
  bool trim_, add_prefix_space_;
};

class SequenceProc final : public PostProcessor {
 public:
  explicit SequenceProc(std::vector<PostProcessorPtr> items) : items_(std::move(items)) {}
  size_t added_tokens(bool is_pair) const override {
    size_t n = 0;
    for (auto& p : items_) n += p->added_tokens(is_pair);
    return n;
  }
  void process_encodings(std::vector<Encoding>& encs, bool add_special) const override {
    for (auto& p : items_) p->process_encodings(encs, add_special);
  }
  json to_json() const override {
    json arr = json::array();
    for (auto& p : items_) arr.push_back(p->to_json());
    return json{{"type", "Sequence"}, {"processors", arr}};
  }

 private:
  std::vector<PostProcessorPtr> items_;
};

std::vector<Piece> parse_template_string(const std::string& s) {
  std::vector<Piece> out;
  std::istringstream in(s);
  std::string word;
  while (in >> word) {
    uint32_t type_id = 0;
    std::string name = word;
    size_t colon = word.rfind(':');
    if (colon != std::string::npos && colon + 1 < word.size() &&
        word.find_first_not_of("0123456789", colon + 1) == std::string::npos) {
      std::optional<uint32_t> id = parse_u32(std::string_view(word).substr(colon + 1));
      if (!id) raise<ValueError>("template processing: type id in '{}' is out of range", word);
      type_id = *id;
      name = word.substr(0, colon);
    }
    if (name == "$" || name == "$A" || name == "$a") {
      out.push_back({true, "A", type_id});
    } else if (name == "$B" || name == "$b") {
      out.push_back({true, "B", type_id});
    } else if (!name.empty() && name[0] == '$' && name.find_first_not_of("0123456789", 1) == std::string::npos) {
      std::optional<uint32_t> id = parse_u32(std::string_view(name).substr(1));
      if (!id) raise<ValueError>("template processing: '{}' is not a sequence of type id below 2^32", name);
      out.push_back({true, "A", *id});
    } else {
      out.push_back({false, name, type_id});
    }
  }
  return out;
}

std::vector<Piece> template_from_json(const json& j, const char* which) {
  std::vector<Piece> out;
  if (j.is_string()) return parse_template_string(j.get<std::string>());
  FOUNDRY_CHECK_AS(ValueError, j.is_array(), "tokenizer.json: TemplateProcessing {} must be an array", which);
  for (auto& p : j) {
    if (p.contains("Sequence")) {
      const json& s = p["Sequence"];
      out.push_back({true, json_string(s, "id", "TemplateProcessing Sequence"), s.value("type_id", 0u)});
    } else if (p.contains("SpecialToken")) {
      const json& s = p["SpecialToken"];
      out.push_back({false, json_string(s, "id", "TemplateProcessing SpecialToken"), s.value("type_id", 0u)});
    } else {
      raise<ValueError>("tokenizer.json: TemplateProcessing piece must be Sequence or SpecialToken");
    }
  }
  return out;
}

std::pair<std::string, uint32_t> token_pair(const json& j, const char* key, const char* what) {
  const json& v = json_field(j, key, what);
  FOUNDRY_CHECK_AS(ValueError, v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_number_integer(),
                   "tokenizer.json: {} field '{}' must be [token, id]", what, key);
  return {v[0].get<std::string>(), v[1].get<uint32_t>()};
}

}  // namespace

PostProcessorPtr make_byte_level_processor(bool add_prefix_space, bool trim) {
  return std::make_shared<ByteLevelProc>(add_prefix_space, trim, true);
}

PostProcessorPtr make_template_processor(const std::string& single, const std::string& pair,
                                         const std::vector<std::pair<std::string, uint32_t>>& specials) {
  std::vector<SpecialTok> sp;
  for (auto& [t, id] : specials) sp.push_back({t, {id}, {t}});
  return std::make_shared<Template>(parse_template_string(single), parse_template_string(pair), std::move(sp));
}

PostProcessorPtr post_processor_from_json(const json& j) {
  if (j.is_null()) return nullptr;
  FOUNDRY_CHECK_AS(ValueError, j.is_object(), "tokenizer.json: post_processor must be an object");
  std::string type = json_string(j, "type", "post_processor");
  if (type == "ByteLevel")
    return std::make_shared<ByteLevelProc>(j.value("add_prefix_space", true), j.value("trim_offsets", true),
                                           j.value("use_regex", true));
  if (type == "TemplateProcessing") {
    std::vector<SpecialTok> sp;
    if (j.contains("special_tokens")) {
      for (auto it = j["special_tokens"].begin(); it != j["special_tokens"].end(); ++it) {
        const json& s = it.value();
        SpecialTok t;
        t.id = s.value("id", it.key());
        t.ids = s.value("ids", std::vector<uint32_t>{});
        t.tokens = s.value("tokens", std::vector<std::string>{});
        FOUNDRY_CHECK_AS(ValueError, t.ids.size() == t.tokens.size(),
                         "tokenizer.json: TemplateProcessing special token '{}' has {} ids but {} tokens", t.id,
                         t.ids.size(), t.tokens.size());
        sp.push_back(std::move(t));
      }
    }
    return std::make_shared<Template>(template_from_json(json_field(j, "single", "TemplateProcessing"), "single"),
                                      template_from_json(json_field(j, "pair", "TemplateProcessing"), "pair"), std::move(sp));
  }
  if (type == "BertProcessing") {
    auto sep = token_pair(j, "sep", "BertProcessing");
    auto cls = token_pair(j, "cls", "BertProcessing");
    return std::make_shared<BertProc>(sep.first, sep.second, cls.first, cls.second);
  }
  if (type == "RobertaProcessing") {
    auto sep = token_pair(j, "sep", "RobertaProcessing");
    auto cls = token_pair(j, "cls", "RobertaProcessing");
    return std::make_shared<RobertaProc>(sep.first, sep.second, cls.first, cls.second, j.value("trim_offsets", true),
                                         j.value("add_prefix_space", true));
  }
  if (type == "Sequence") {
    std::vector<PostProcessorPtr> items;
    for (auto& p : json_field(j, "processors", "Sequence post_processor")) {
      auto q = post_processor_from_json(p);
      if (q) items.push_back(q);
    }
    return std::make_shared<SequenceProc>(std::move(items));
  }
  raise<ValueError>("tokenizer.json: unknown post_processor type '{}'", type);
}

}  // namespace foundry::text
