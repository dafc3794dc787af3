// src/common/error_types.cpp: fibra's error types made again from their names.
#include "common/error_types.hpp"

namespace fibra::detail {
namespace {

// The error of the type in `E...` named `type`, made from what each kind keeps: its message alone,
// or also the remote type and message of a RemoteError (its site is not known here).
template <class... E>
std::exception_ptr make_named(ErrorTypes<E...>, const std::string& type, const std::string& what,
                              const std::string& remote_type, const std::string& remote_message) {
  std::exception_ptr out;
  const auto make = [&]<class T>() {
    if constexpr (std::is_base_of_v<RemoteError, T>)
      out = std::make_exception_ptr(T(what, remote_type, remote_message, RemoteSite{}));
    else
      out = std::make_exception_ptr(T(what));
    return true;
  };
  (void)((type == demangle(typeid(E).name()) && make.template operator()<E>()) || ...);
  return out;
}

}  // namespace

std::exception_ptr make_fibra_error(const std::string& type, const std::string& what, const std::string& remote_type,
                                    const std::string& remote_message) {
  if (auto e = make_named(MessageErrors{}, type, what, remote_type, remote_message)) return e;
  return make_named(SiteErrors{}, type, what, remote_type, remote_message);
}

}  // namespace fibra::detail
