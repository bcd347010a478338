// Error handling at API boundaries: Error (a message for the user) and Expected<T>
// (a value or an Error). The engine never calls exit() and never throws across its
// public API; callers print Error::message and exit 1.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace spw {

/// A failure with a complete, user-facing message (names the file, tensor or key involved).
struct Error {
  std::string message;
};

/// Builds an Error with fmt formatting: `return make_error("tensor '{}' ...", name);`
template <typename... Args>
Error make_error(fmt::format_string<Args...> f, Args&&... args) {
  return Error{fmt::format(f, std::forward<Args>(args)...)};
}

/// A value or an Error (C++23 std::expected in miniature). Access to the wrong side asserts.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Expected(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const {
    assert(!ok());
    return std::get<1>(v_);
  }

 private:
  std::variant<T, Error> v_;
};

/// Success or an Error, for operations without a result.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT
  static Status Ok() { return Status(); }

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const {
    assert(!ok_);
    return error_;
  }

 private:
  Error error_;
  bool ok_ = true;
};

}  // namespace spw
