// OpenAI-format error bodies and the Status -> HTTP status mapping (api_error.h).
#include "api_error.h"

#include <nlohmann/json.hpp>

namespace phi4mm::server {

ApiError InvalidRequest(std::string param, std::string message, std::string code) {
  if (code.empty()) code = "invalid_request";
  return {400, "invalid_request_error", std::move(message), std::move(param), std::move(code), 0};
}

ApiError NotSupported(std::string param, std::string message) {
  return InvalidRequest(std::move(param), std::move(message), "not_supported");
}

ApiError Unavailable(std::string message, int retry_after_seconds) {
  return {503, "unavailable_error", std::move(message), "", "unavailable", retry_after_seconds};
}

ApiError ServerError(std::string message) { return {500, "server_error", std::move(message), "", "internal_error", 0}; }

ApiError FromStatus(const Status& st, std::string param) {
  switch (st.code()) {
    case StatusCode::kOk:
      return {};
    case StatusCode::kInvalidArgument:
    case StatusCode::kDataLoss:
    case StatusCode::kUnsupported:
    case StatusCode::kNotFound:
      return InvalidRequest(std::move(param), st.message());
    case StatusCode::kOutOfRange:
      return InvalidRequest(std::move(param), st.message(), "context_length_exceeded");
    case StatusCode::kResourceExhausted:
      return {429, "rate_limit_error", st.message(), "", "server_overloaded", 1};
    case StatusCode::kCancelled: {
      ApiError e = Unavailable(st.message(), 5);
      e.code = "cancelled";
      return e;
    }
    case StatusCode::kDeadlineExceeded:
      return {504, "timeout_error", st.message(), "", "request_timeout", 0};
    default:
      return ServerError(st.message());
  }
}

std::string ErrorBody(const ApiError& e) {
  nlohmann::json err = {{"message", e.message}, {"type", e.type}};
  err["param"] = e.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.param);
  err["code"] = e.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.code);
  return nlohmann::json{{"error", err}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace phi4mm::server
