// fibra/detail/call_checks.hpp: the compile-time checks of remote functions (FIBRA_REMOTE) and of
// Pool calls. Each misuse gets a static_assert with fibra's own sentence, placed so that it is the
// first error the compiler prints (tests/compile_fail/ holds one program per sentence).
#pragma once

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "fibra/detail/codec.hpp"

namespace fibra::detail {

// ---- compile-time checks of remote functions, each with fibra's own sentence -------------------

/// One value a remote function takes or returns must be one fibra can send, and a type sent with
/// its serialize() needs fibra/serialization.hpp in the file that sends it.
template <class T>
constexpr bool check_sendable() {
  static_assert(std::is_default_constructible_v<std::remove_cvref_t<T>>, FIBRA_DETAIL_NO_DEFAULT_CONSTRUCTOR);
  static_assert(!std::is_default_constructible_v<std::remove_cvref_t<T>> || codable_v<T>, FIBRA_DETAIL_NOT_CODABLE);
  if constexpr (codable_v<T> && via_boost_v<T>)
    static_assert(boost_codec_included<std::remove_cvref_t<T>>, FIBRA_DETAIL_INCLUDE_SERIALIZATION);
  return true;
}

/// One parameter of a remote function.
template <class P>
constexpr bool check_parameter() {
  static_assert(!std::is_pointer_v<std::remove_cvref_t<P>>,
                "fibra: a remote function cannot take a pointer: it would point into the caller's memory, which "
                "the worker does not share; take the value itself (or a std::vector of values)");
  static_assert(!(std::is_lvalue_reference_v<P> && !std::is_const_v<std::remove_reference_t<P>>),
                "fibra: a remote function cannot take a non-const reference: it runs on a copy in another "
                "process, so a change made through it would be lost; take the parameter by value or by const "
                "reference and return what the function computes");
  return check_sendable<std::remove_cvref_t<P>>();
}

/// A function `R(Args...)` that runs on workers (FIBRA_REMOTE and every Pool call check it).
template <class R, class... Args>
constexpr bool check_signature() {
  static_assert(!std::is_pointer_v<std::remove_cvref_t<R>>,
                "fibra: a remote function cannot return a pointer: it would point into the worker's memory; "
                "return the value itself (or a std::vector of values)");
  if constexpr (!std::is_void_v<R> && !std::is_pointer_v<std::remove_cvref_t<R>>)
    check_sendable<std::remove_cvref_t<R>>();
  return (check_parameter<Args>() && ...);
}

/// The element type of what map, starmap and imap return: a function that returns void has none
/// (submit it, or run it as a fibra::Process).
template <class R>
struct map_result {
  static_assert(!std::is_void_v<R>,
                "fibra: map, starmap and imap need a function that returns a value (a void function can be "
                "submitted, or run as a fibra::Process)");
  using type = std::remove_cvref_t<R>;
};
template <class R>
using mapped_t = typename map_result<R>::type;

// ---- compile-time checks of Pool calls, each with fibra's own sentence ------------------------

/// Parameters of a function pointer (noexcept or not); -1 for anything else.
template <class F>
struct arity : std::integral_constant<int, -1> {};
template <class R, class... P>
struct arity<R (*)(P...)> : std::integral_constant<int, int(sizeof...(P))> {};
template <class R, class... P>
struct arity<R (*)(P...) noexcept> : std::integral_constant<int, int(sizeof...(P))> {};
/// What a call was given as its function, decayed as a function name decays to its address.
template <class F>
inline constexpr int arity_v = arity<std::decay_t<F>>::value;

template <class From, class To>
concept brace_converts = requires(From f) {
  To{f};
};

/// True when an item X would lose value as the parameter A (a double into an int, an int into a
/// short or an unsigned). An integer into a floating-point parameter is let through, as Python does.
template <class X, class A>
inline constexpr bool narrows_v = [] {
  using F = std::remove_cvref_t<X>;
  using T = std::remove_cvref_t<A>;
  if constexpr (std::is_arithmetic_v<F> && std::is_arithmetic_v<T> &&
                !(std::is_integral_v<F> && std::is_floating_point_v<T>))
    return !brace_converts<F, T>;
  else
    return false;
}();

/// An input item of type X is given to a parameter of type A.
template <class X, class A>
constexpr bool check_item() {
  using P = std::remove_cvref_t<A>;
  static_assert(std::is_constructible_v<P, const std::remove_cvref_t<X>&>,
                "fibra: an input does not convert to the function's parameter type: pass items of the type the "
                "function takes");
  static_assert(!narrows_v<X, A>,
                "fibra: an input would be narrowed into the function's parameter (a double into an int, say), "
                "losing what does not fit: convert the inputs yourself first (std::views::transform and a "
                "static_cast) or change the parameter's type");
  return true;
}

/// A starmap item (a tuple, pair or array) against the function's parameters P...
template <class Item, class... P>
constexpr bool check_tuple_item() {
  constexpr bool tuple_like = requires { std::tuple_size<Item>::value; };
  static_assert(tuple_like,
                "fibra: starmap takes a range of tuples (or pairs or std::arrays) of arguments, one per call; for a "
                "function of one parameter, use map");
  if constexpr (tuple_like) {
    static_assert(std::tuple_size_v<Item> == sizeof...(P),
                  "fibra: starmap: each item has a different number of elements than the function has parameters");
    if constexpr (std::tuple_size_v<Item> == sizeof...(P)) {
      return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return (check_item<std::tuple_element_t<I, Item>, P>() && ...);
      }
      (std::index_sequence_for<P...>{});
    }
  }
  return true;
}

namespace call_probe {
struct Named {
  void operator()();
};
template <class T>
struct Both : T, Named {};
}  // namespace call_probe

/// Something a caller may take for a function a worker can run: a member function, or an object
/// with an operator() (a lambda, generic or not, a function object, a std::function). The refusing
/// overloads of fibra::submit and fibra::Process take only these: ADL finds fibra::submit for any
/// unqualified call named submit that has an argument of fibra's, and a Process is built from
/// nothing else. An operator() in F makes the name ambiguous in Both<F> (found even if private).
template <class F, class D = std::decay_t<F>>
concept callable_object = std::is_member_function_pointer_v<D> ||
    (std::is_class_v<D>&& requires { sizeof(D); } &&  // a complete type only: the probes below need one
     (std::is_final_v<D> ? requires { &D::operator(); } : !requires { &call_probe::Both<D>::operator(); }));

/// The first of a call's arguments (int for none).
template <class... Args>
using first_arg_t = std::tuple_element_t<0, std::tuple<Args..., int>>;

/// What a call was given is not a free function of the right arity: the sentence that says so.
/// consteval, and the overloads that call it return `auto` (deduced): both make the compiler check
/// it where the call is, so the sentence is the first error, before any in the code that uses the
/// result. A constexpr function or a declared `void` is instantiated only at the end of the file,
/// after "'void r' has incomplete type" and the like.
template <class F, bool one_parameter>
consteval void refuse_function() {
  using D = std::decay_t<F>;
  static_assert(!std::is_class_v<D>,
                "fibra: a lambda or function object cannot run on a worker (it has no name another process can "
                "look up): pass a free function registered with FIBRA_REMOTE");
  static_assert(!std::is_member_function_pointer_v<D>,
                "fibra: a member function cannot run on a worker (it needs an object the worker does not have): "
                "pass a free function, registered with FIBRA_REMOTE, that takes the object as a parameter");
  static_assert(!(one_parameter && arity_v<F> >= 0),
                "fibra: map, imap and imap_unordered call the function with one item, so it must take one "
                "parameter; for a function of several, pass tuples of arguments to starmap (or call apply_async)");
  static_assert(std::is_class_v<D> || std::is_member_function_pointer_v<D> || arity_v<F> >= 0,
                "fibra: pass a free function registered with FIBRA_REMOTE");
}

}  // namespace fibra::detail
