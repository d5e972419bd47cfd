// Status and Result<T>: how every fallible operation in phi4mm reports failure. A Status carries a
// code and a message written for the user ("what went wrong, with which file/tensor/value, and what
// to do"); the library never prints or exits on its own, it returns these.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace phi4mm {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad request / bad user input (prompt, flags, sampling values)
  kNotFound,         // missing file or tensor
  kDataLoss,         // truncated or corrupt file
  kUnsupported,      // valid input we do not handle (dtype, model_type, format)
  kOutOfRange,       // e.g. prompt longer than the context
  kInternal,         // a bug: an invariant did not hold
  kCancelled,        // the caller stopped generation
  kResourceExhausted,  // a queue or memory budget is full now; retrying later may succeed (HTTP 429)
  kDeadlineExceeded,   // the request's deadline passed before it finished
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: <message>"
  std::string ToString() const;
  // Returns a copy whose message is prefixed with `context: `.
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}            // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {     // NOLINT: implicit by design
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "Result built from an OK status");
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace phi4mm

#define PHI4MM_CONCAT_INNER(a, b) a##b
#define PHI4MM_CONCAT(a, b) PHI4MM_CONCAT_INNER(a, b)

#define PHI4MM_RETURN_IF_ERROR(expr)              \
  do {                                            \
    ::phi4mm::Status _phi4mm_st = (expr);         \
    if (!_phi4mm_st.ok()) return _phi4mm_st;      \
  } while (0)

#define PHI4MM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

#define PHI4MM_ASSIGN_OR_RETURN(lhs, expr) \
  PHI4MM_ASSIGN_OR_RETURN_IMPL(PHI4MM_CONCAT(_phi4mm_r_, __LINE__), lhs, expr)
