// fibra/hdf5_io/element_type.hpp: how one result is stored in a checkpoint.
//
// Arithmetic results (and fixed-size arrays of them) are stored as native HDF5 numbers, so h5py and
// h5dump read them without fibra; every other type is stored as the caller's serialized bytes.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace fibra::hdf5_io {

/// @brief A number type HDF5 stores natively (little-endian in the file).
enum class NativeType : std::uint8_t { int8, uint8, int16, uint16, int32, uint32, int64, uint64, float32, float64 };

/// @brief Size in bytes of one `NativeType` number.
std::size_t size_of(NativeType t) noexcept;

/// @brief Name of a `NativeType` as written in the file and by `fibra inspect` ("float64", "int32", ...).
const char* name_of(NativeType t) noexcept;

/// @brief The type of one result: a native number or fixed-size array of numbers, or opaque bytes.
///
/// Example: `ElementType::native_of(NativeType::float32, {3})` describes `std::array<float, 3>`.
struct ElementType {
  /// @brief Native numbers (one HDF5 dataset of shape (n_inputs, shape...)) or serialized bytes.
  enum class Kind : std::uint8_t { native, bytes };

  Kind kind = Kind::bytes;                ///< how results are stored
  NativeType native = NativeType::uint8;  ///< the number type when `kind == native`
  std::vector<std::uint64_t> shape;       ///< array extents of one result (empty for a scalar)
  std::string encoding;                   ///< for bytes: how the bytes were made ("boost-binary", ...)

  /// @brief A native number type, optionally an array of `shape`.
  static ElementType native_of(NativeType t, std::vector<std::uint64_t> shape = {});
  /// @brief Opaque serialized bytes, one blob per item; `encoding` is recorded for readers.
  static ElementType bytes_of(std::string encoding = {});

  /// @brief Bytes of one native result (numbers times their size); 0 for the bytes kind.
  std::size_t size_bytes() const noexcept;
  /// @brief Human-readable description: "float64", "float32[3]", "int64[2][2]", "bytes (boost-binary)".
  std::string describe() const;

  friend bool operator==(const ElementType&, const ElementType&) = default;
};

namespace detail {
template <class T>
constexpr NativeType native_type_of() {
  if constexpr (std::is_floating_point_v<T>) {
    return sizeof(T) == 4 ? NativeType::float32 : NativeType::float64;
  } else if constexpr (std::is_signed_v<T>) {
    constexpr NativeType types[] = {NativeType::int8, NativeType::int16, NativeType::int32, NativeType::int64};
    return types[sizeof(T) == 1 ? 0 : sizeof(T) == 2 ? 1 : sizeof(T) == 4 ? 2 : 3];
  } else {
    constexpr NativeType types[] = {NativeType::uint8, NativeType::uint16, NativeType::uint32, NativeType::uint64};
    return types[sizeof(T) == 1 ? 0 : sizeof(T) == 2 ? 1 : sizeof(T) == 4 ? 2 : 3];
  }
}

/// Arithmetic types HDF5 stores natively: integers of 1-8 bytes and IEEE float/double; not bool
/// (fibra refuses bool results) and not long double (no portable file type).
template <class T>
concept NativeScalar = (std::is_integral_v<T> && !std::is_same_v<T, bool> && sizeof(T) <= 8) ||
                       std::is_same_v<T, float> || std::is_same_v<T, double>;

template <class T>
struct ArrayTraits {
  static constexpr bool native = NativeScalar<T>;
  using Scalar = T;
  static void shape(std::vector<std::uint64_t>&) {}
};
template <class T, std::size_t N>
struct ArrayTraits<std::array<T, N>> {
  static constexpr bool native = ArrayTraits<T>::native && N > 0;
  using Scalar = typename ArrayTraits<T>::Scalar;
  static void shape(std::vector<std::uint64_t>& s) {
    s.push_back(N);
    ArrayTraits<T>::shape(s);
  }
};
}  // namespace detail

/// @brief True when results of type `T` are stored natively (see `element_type_of`).
template <class T>
inline constexpr bool is_native_element = detail::ArrayTraits<std::remove_cv_t<T>>::native;

/// @brief The element type fibra uses for results of type `T`.
///
/// `double` -> float64, `int` -> int32, `std::array<float, 3>` -> float32[3],
/// `std::array<std::array<double, 2>, 2>` -> float64[2][2]; everything else -> bytes.
template <class T>
ElementType element_type_of(std::string bytes_encoding = {}) {
  using Traits = detail::ArrayTraits<std::remove_cv_t<T>>;
  if constexpr (Traits::native) {
    std::vector<std::uint64_t> shape;
    Traits::shape(shape);
    return ElementType::native_of(detail::native_type_of<typename Traits::Scalar>(), std::move(shape));
  } else {
    return ElementType::bytes_of(std::move(bytes_encoding));
  }
}

}  // namespace fibra::hdf5_io
