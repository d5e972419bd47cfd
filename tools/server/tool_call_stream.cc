// ToolCallStream: a character scanner over the tool-call list (tool_call_stream.h). It tracks the
// nesting depth and strings; inside a call object (depth 2) it reads keys, the "name" string and
// the raw text of the "arguments" value.
#include "tool_call_stream.h"

#include <nlohmann/json.hpp>

namespace phi4mm::server {

void ToolCallStream::Arg(char c, std::vector<ToolCallDelta>* out) {
  if (!named_) {
    pending_args_ += c;
    return;
  }
  calls_.back().arguments += c;
  const size_t index = calls_.size() - 1;
  if (out->empty() || out->back().index != index || out->back().header) out->push_back({index, false, "", "", ""});
  out->back().arguments += c;
}

void ToolCallStream::EndKeyOrName() {
  if (slot_ == Slot::kKey) {
    key_ = raw_;
  } else {
    const nlohmann::json name = nlohmann::json::parse("\"" + raw_ + "\"", nullptr, false);
    calls_.push_back({RandomId("call_", 24), name.is_string() ? name.get<std::string>() : raw_, pending_args_});
    named_ = true;
  }
  slot_ = Slot::kNone;
}

std::vector<ToolCallDelta> ToolCallStream::Push(std::string_view text) {
  std::vector<ToolCallDelta> out;
  for (char c : text) {
    if (done_) break;
    if (in_string_) {
      if (slot_ == Slot::kArgs) Arg(c, &out);
      else if (slot_ == Slot::kKey || slot_ == Slot::kName) raw_ += c;
      if (escape_) {
        escape_ = false;
        continue;
      }
      if (c == '\\') {
        escape_ = true;
        continue;
      }
      if (c != '"') continue;
      in_string_ = false;
      if (slot_ == Slot::kKey || slot_ == Slot::kName) {
        raw_.pop_back();
        const bool name = slot_ == Slot::kName;
        EndKeyOrName();
        if (name) {
          const ToolCall& call = calls_.back();
          out.push_back({calls_.size() - 1, true, call.id, call.name, call.arguments});
        }
      } else if (depth_ == 2) {
        slot_ = Slot::kNone;  // a string value ended
      }
      continue;
    }
    if (!started_) {
      if (c == '[') started_ = true, depth_ = 1;
      continue;
    }
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      if (slot_ == Slot::kArgs) Arg(c, &out);
      continue;
    }
    if (depth_ == 2 && expect_value_) {
      expect_value_ = false;
      if (key_ == "name" && c == '"') {
        slot_ = Slot::kName;
        raw_.clear();
        in_string_ = true;
        continue;
      }
      slot_ = key_ == "arguments" ? Slot::kArgs : Slot::kOther;
    }
    // A number, true, false or null value ends before the comma or brace that follows it.
    if ((slot_ == Slot::kArgs || slot_ == Slot::kOther) && depth_ == 2 && (c == ',' || c == '}')) slot_ = Slot::kNone;
    if (slot_ == Slot::kArgs) Arg(c, &out);
    switch (c) {
      case '"':
        in_string_ = true;
        if (depth_ == 2 && slot_ == Slot::kNone) {
          slot_ = Slot::kKey;
          raw_.clear();
        }
        break;
      case '{':
      case '[':
        ++depth_;
        if (depth_ == 2) {
          named_ = false;
          pending_args_.clear();
          slot_ = Slot::kNone;
        }
        break;
      case '}':
      case ']':
        --depth_;
        if (depth_ == 2 && (slot_ == Slot::kArgs || slot_ == Slot::kOther)) slot_ = Slot::kNone;  // its value closed
        if (depth_ <= 1) slot_ = Slot::kNone;
        if (depth_ == 0) done_ = true;
        break;
      case ':':
        if (depth_ == 2 && slot_ == Slot::kNone) expect_value_ = true;
        break;
      default:
        break;
    }
  }
  return out;
}

}  // namespace phi4mm::server
