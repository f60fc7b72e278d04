// Status and Result<T>: how deepwire reports errors without exceptions crossing library boundaries.
// Contract: a failed Status always carries a message a user can act on (what, where, how to fix).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace dw {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status okStatus() { return Status(); }
  static Status error(std::string message) { return Status(std::move(message)); }

  bool ok() const { return !message_.has_value(); }
  explicit operator bool() const { return ok(); }
  const std::string& message() const {
    static const std::string kEmpty;
    return message_ ? *message_ : kEmpty;
  }
  // Prefixes context (a node, a file, a JSON path) to an error; no-op on success.
  Status withContext(const std::string& context) const {
    return ok() ? *this : Status(context + ": " + *message_);
  }

 private:
  explicit Status(std::string m) : message_(std::move(m)) {}
  std::optional<std::string> message_;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Status status) : v_(std::move(status)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  Status status() const { return ok() ? Status() : std::get<1>(v_); }
  const std::string& message() const {
    static const std::string kEmpty;
    return ok() ? kEmpty : std::get<1>(v_).message();
  }

 private:
  std::variant<T, Status> v_;
};

}  // namespace dw

#define DW_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::dw::Status dw_status_ = (expr);        \
    if (!dw_status_.ok()) return dw_status_; \
  } while (0)
