// Chat templates: the Jinja subset that Hugging Face chat templates (tokenizer_config.json's
// chat_template) are written in, rendered as transformers' apply_chat_template renders them
// (jinja2 with trim_blocks and lstrip_blocks; raise_exception, namespace, strftime_now globals).
//
// Supported: {{ }}, {% if/elif/else %}, {% for x in ... [if ...] %} with loop.* and else, {% set %}
// (names and namespace attributes), {% generation %} (rendered through), comments, whitespace
// control (-), literals, lists, dicts, attribute / item / slice access, the operators of
// expressions (arithmetic, ~, comparisons, in, and/or/not, a if c else b), tests (defined, none,
// string, ...), the common filters (trim, length, tojson, join, default, upper, lower, items, ...)
// and string / dict methods (strip, split, startswith, items, get, ...). Anything else is a
// ValueError naming it, never silently wrong text.
#pragma once

#include <memory>
#include <string>

namespace foundry::models {

/// ChatML, the template a folder without one gets (with a warning): <|im_start|>role\ncontent<|im_end|>\n.
extern const char* const kChatMlTemplate;

class ChatTemplate {
 public:
  /// Parses the template; ValueError naming the problem and its offset on a syntax error.
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  /// Renders with the variables of `context_json` (a JSON object: messages, bos_token, ...).
  std::string render(const std::string& context_json) const;
  /// apply_chat_template(messages, add_generation_prompt, tokenize=False): `messages_json` is a
  /// JSON list of {"role", "content"} objects.
  std::string apply(const std::string& messages_json, bool add_generation_prompt, const std::string& bos_token,
                    const std::string& eos_token) const;

  struct Node;

 private:
  std::shared_ptr<const Node> root_;
};

}  // namespace foundry::models
