// The errors the server answers with, in OpenAI's JSON error format
// ({"error":{"message","type","param","code"}}), and how library Status codes map onto HTTP
// statuses: bad input 400, missing key 401, unknown path 404, wrong method 405, body too large 413,
// queue full 429 (with Retry-After), engine failure 500, loading/draining 503.
#pragma once

#include <string>

#include "phi4mm/base/status.h"

namespace phi4mm::server {

struct ApiError {
  int status = 0;  // 0 = no error
  std::string type;
  std::string message;
  std::string param;  // JSON path of the offending field; empty = null
  std::string code;   // a machine-readable reason (every error the server sends has one)
  int retry_after_seconds = 0;  // sent as Retry-After when > 0
  bool ok() const { return status == 0; }
};

ApiError InvalidRequest(std::string param, std::string message, std::string code = "");
ApiError NotSupported(std::string param, std::string message);
ApiError Unavailable(std::string message, int retry_after_seconds = 0);
ApiError ServerError(std::string message);
// A library Status as an API error: InvalidArgument/DataLoss/Unsupported/NotFound -> 400,
// OutOfRange -> 400 context_length_exceeded, ResourceExhausted -> 429, Cancelled -> 503,
// DeadlineExceeded -> 504, anything else 500.
ApiError FromStatus(const Status& st, std::string param = "");

// The JSON body of an error.
std::string ErrorBody(const ApiError& e);

}  // namespace phi4mm::server
