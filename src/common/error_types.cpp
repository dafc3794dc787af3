// src/common/error_types.cpp: fibra's error types made again from their names.
#include "common/error_types.hpp"

namespace fibra::detail {
namespace {

template <class... E>
std::exception_ptr make_message_error(ErrorTypes<E...>, const std::string& type, const std::string& what) {
  std::exception_ptr out;
  (void)((type == demangle(typeid(E).name()) ? (out = std::make_exception_ptr(E(what)), true) : false) || ...);
  return out;
}

template <class... E>
std::exception_ptr make_site_error(ErrorTypes<E...>, const std::string& type, const std::string& what,
                                   const std::string& remote_type, const std::string& remote_message) {
  std::exception_ptr out;
  (void)((type == demangle(typeid(E).name())
              ? (out = std::make_exception_ptr(E(what, remote_type, remote_message, RemoteSite{})), true)
              : false) ||
         ...);
  return out;
}

}  // namespace

std::exception_ptr make_fibra_error(const std::string& type, const std::string& what, const std::string& remote_type,
                                    const std::string& remote_message) {
  if (auto e = make_message_error(MessageErrors{}, type, what)) return e;
  return make_site_error(SiteErrors{}, type, what, remote_type, remote_message);
}

}  // namespace fibra::detail
