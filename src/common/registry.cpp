#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "common/error_types.hpp"
#include "fibra/detail/registry.hpp"
#include "fibra/error.hpp"

namespace fibra::detail {
namespace {

struct Registry {
  std::vector<std::unique_ptr<FunctionEntry>> entries;
  std::unordered_map<const void*, FunctionEntry*> by_address;
  std::unordered_map<std::uint64_t, FunctionEntry*> by_id;
  std::unordered_map<std::string, FunctionEntry*> by_method;
  std::vector<std::string> clashes;
  std::unordered_map<std::string, ExceptionMaker> exceptions;  // by demangled type name
};

// fibra's own error types travel as registered ones do: one that escapes a task is caught as itself.
Registry make_registry() {
  Registry r;
  for_each_message_error(MessageErrors{},
                         [&r](std::string name, ExceptionMaker make) { r.exceptions.emplace(std::move(name), make); });
  return r;
}

Registry& registry() {
  static Registry r = make_registry();  // constructed on first FIBRA_REMOTE, whatever the static-init order
  return r;
}

}  // namespace

std::uint64_t hash_name(std::string_view s) noexcept {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> p(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && p ? std::string(p.get()) : std::string(mangled);
}

std::string exception_type_name(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (...) {
    const std::type_info* t = abi::__cxa_current_exception_type();
    return t ? demangle(t->name()) : std::string("unknown");
  }
}

bool add_exception(const std::type_info& t, ExceptionMaker make) noexcept {
  try {
    registry().exceptions.emplace(demangle(t.name()), make);
    return true;
  } catch (...) {
    std::fputs("fibra: out of memory while registering exception types\n", stderr);
    std::abort();
  }
}

std::exception_ptr make_registered_exception(const std::string& type_name, std::string context, std::string message,
                                             RemoteSite site) {
  const auto& m = registry().exceptions;
  const auto it = m.find(type_name);
  if (it == m.end()) return nullptr;
  return it->second(std::move(context), type_name, std::move(message), std::move(site));
}

bool add_function(FunctionEntry e) noexcept {
  try {
    auto& r = registry();
    if (auto it = r.by_id.find(e.id); it != r.by_id.end()) {
      if (it->second->address != e.address)
        r.clashes.push_back("two different functions are registered as '" + e.name +
                            "': give one of them another name (FIBRA_REMOTE uses the name as written)");
      return true;
    }
    auto p = std::make_unique<FunctionEntry>(std::move(e));
    r.by_address[p->address] = p.get();
    r.by_id[p->id] = p.get();
    if (!p->method_key.empty()) r.by_method[p->method_key] = p.get();
    r.entries.push_back(std::move(p));
    return true;
  } catch (...) {
    std::fputs("fibra: out of memory while registering remote functions\n", stderr);
    std::abort();
  }
}

const FunctionEntry& function_by_address(const void* address, const char* what_call) {
  auto& r = registry();
  if (auto it = r.by_address.find(address); it != r.by_address.end()) return *it->second;
  std::string name = "the function";
  Dl_info info{};
  if (dladdr(address, &info) != 0 && info.dli_sname) name = "'" + demangle(info.dli_sname) + "'";
  throw ConfigError("fibra: " + std::string(what_call) + " was given " + name +
                    ", which is not registered for remote calls: add FIBRA_REMOTE(<its name>); at "
                    "namespace scope next to its definition");
}

const FunctionEntry* function_by_method(std::string_view key) noexcept {
  auto& r = registry();
  auto it = r.by_method.find(std::string(key));
  return it == r.by_method.end() ? nullptr : it->second;
}

ActorSlot& actor_slot() noexcept {
  static ActorSlot slot;
  return slot;
}

const FunctionEntry* function_by_id(std::uint64_t id) noexcept {
  auto& r = registry();
  auto it = r.by_id.find(id);
  return it == r.by_id.end() ? nullptr : it->second;
}

std::uint64_t registry_fingerprint() noexcept {
  auto& r = registry();
  std::map<std::string, std::string> sorted;
  for (auto& e : r.entries) sorted[e->name] = e->signature;
  std::string all;
  for (auto& [n, s] : sorted) all += n + '\x1f' + s + '\x1e';
  return hash_name(all);
}

std::size_t registry_size() noexcept { return registry().entries.size(); }

std::vector<std::string> registry_names() {
  std::vector<std::string> names;
  for (auto& e : registry().entries) names.push_back(e->name);
  std::sort(names.begin(), names.end());
  return names;
}

void check_registry() {
  auto& r = registry();
  if (!r.clashes.empty()) throw ConfigError("fibra: " + r.clashes.front());
}

}  // namespace fibra::detail
