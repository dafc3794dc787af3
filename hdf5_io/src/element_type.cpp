// hdf5_io/src/element_type.cpp: names and sizes of result element types.
#include "fibra/hdf5_io/element_type.hpp"

namespace fibra::hdf5_io {

std::size_t size_of(NativeType t) noexcept {
  switch (t) {
    case NativeType::int8:
    case NativeType::uint8: return 1;
    case NativeType::int16:
    case NativeType::uint16: return 2;
    case NativeType::int32:
    case NativeType::uint32:
    case NativeType::float32: return 4;
    case NativeType::int64:
    case NativeType::uint64:
    case NativeType::float64: return 8;
  }
  return 0;
}

const char* name_of(NativeType t) noexcept {
  switch (t) {
    case NativeType::int8: return "int8";
    case NativeType::uint8: return "uint8";
    case NativeType::int16: return "int16";
    case NativeType::uint16: return "uint16";
    case NativeType::int32: return "int32";
    case NativeType::uint32: return "uint32";
    case NativeType::int64: return "int64";
    case NativeType::uint64: return "uint64";
    case NativeType::float32: return "float32";
    case NativeType::float64: return "float64";
  }
  return "?";
}

ElementType ElementType::native_of(NativeType t, std::vector<std::uint64_t> shape) {
  return ElementType{Kind::native, t, std::move(shape), {}};
}

ElementType ElementType::bytes_of(std::string encoding) {
  return ElementType{Kind::bytes, NativeType::uint8, {}, std::move(encoding)};
}

std::size_t ElementType::size_bytes() const noexcept {
  if (kind == Kind::bytes) return 0;
  std::size_t n = size_of(native);
  for (auto e : shape) n *= e;
  return n;
}

std::string ElementType::describe() const {
  if (kind == Kind::bytes) return encoding.empty() ? "bytes" : "bytes (" + encoding + ")";
  std::string s = name_of(native);
  for (auto e : shape) s += "[" + std::to_string(e) + "]";
  return s;
}

}  // namespace fibra::hdf5_io
