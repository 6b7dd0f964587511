// Chat templates: tokenizer_config.json's chat_template rendered as transformers'
// apply_chat_template renders it: the project's one Jinja interpreter (text/jinja.h) configured as
// transformers' environment (trim_blocks, lstrip_blocks; raise_exception, namespace, strftime_now).
#pragma once

#include <string>

#include "foundry/text/jinja.h"

namespace foundry::models {

/// ChatML, the template a folder without one gets (with a warning): <|im_start|>role\ncontent<|im_end|>\n.
extern const char* const kChatMlTemplate;

class ChatTemplate {
 public:
  /// Parses the template; ValueError naming the problem and its offset on a syntax error.
  explicit ChatTemplate(const std::string& source);

  /// Renders with the variables of `context_json` (a JSON object: messages, bos_token, ...).
  std::string render(const std::string& context_json) const;
  /// apply_chat_template(messages, add_generation_prompt, tokenize=False): `messages_json` is a
  /// JSON list of {"role", "content"} objects.
  std::string apply(const std::string& messages_json, bool add_generation_prompt, const std::string& bos_token,
                    const std::string& eos_token) const;

 private:
  text::JinjaTemplate template_;
};

}  // namespace foundry::models
