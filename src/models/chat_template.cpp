// Chat templates through the project's Jinja interpreter, configured as transformers' environment.
#include "foundry/models/chat_template.h"

#include <nlohmann/json.hpp>

#include "foundry/core/error.h"
#include "foundry/io/json_depth.h"

namespace foundry::models {

namespace {
text::JinjaOptions transformers_environment() {
  text::JinjaOptions o;
  o.trim_blocks = o.lstrip_blocks = true;
  o.what = "chat template";
  return o;
}
}  // namespace

ChatTemplate::ChatTemplate(const std::string& source) : template_(source, transformers_environment()) {}

std::string ChatTemplate::render(const std::string& context_json) const { return template_.render(context_json); }

const char* const kChatMlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

std::string ChatTemplate::apply(const std::string& messages_json, bool add_generation_prompt,
                                const std::string& bos_token, const std::string& eos_token) const {
  io::check_json_depth(messages_json, "chat template: messages");
  auto messages = nlohmann::ordered_json::parse(messages_json, nullptr, false);
  if (messages.is_discarded() || !messages.is_array()) raise<ValueError>("chat template: messages must be a JSON list");
  nlohmann::ordered_json ctx = {{"messages", messages},
                                {"add_generation_prompt", add_generation_prompt},
                                {"bos_token", bos_token},
                                {"eos_token", eos_token}};
  return render(ctx.dump());
}

}  // namespace foundry::models
