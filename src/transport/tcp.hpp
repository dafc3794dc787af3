// src/transport/tcp.hpp: the few TCP calls fibra makes outside MPI, each with a bound: a listener on
// the address the pool uses (or every address), a connect, and whole reads and writes. The object server (peers copying
// stored objects) and the join of a worker started apart (transport/join.hpp) use them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"

namespace fibra::detail::tcp {

/// Waits until `fd` is ready for `events` (poll's); false after `ms` or on an error.
bool wait_for(int fd, short events, int ms);
/// Writes all `n` bytes; false if the peer is gone or stops reading for 30 s.
bool write_all(int fd, const void* data, std::size_t n);
/// Reads exactly `n` bytes; false if the peer is gone or sends nothing for `ms`.
bool read_all(int fd, void* data, std::size_t n, int ms);
/// Reads exactly `n` bytes within `ms` in all (a peer that trickles them is not waited for).
bool read_within(int fd, void* data, std::size_t n, int ms);

/// A listening socket on every address of this host (IPv6 and IPv4 where it can, else IPv4),
/// on a port the system picks, and that port. Throws fibra::Error naming `what` when it cannot.
struct Listener {
  UniqueFd fd;
  std::uint16_t port = 0;
};
Listener listen_any(const std::string& what);
/// The same on `address` alone (a numeric IPv4 or IPv6 address); on every address when it is empty.
Listener listen_on(const std::string& address, const std::string& what);
/// This host's interfaces that are up and running, by address (IPv6 link-local ones left out),
/// IPv4 first.
struct Interface {
  std::string name, address;  ///< its name ("eth0"), one numeric address of it
  bool loopback = false;
};
std::vector<Interface> interfaces();

/// The address fibra's own listeners use (and their peers are given): FIBRA_LISTEN (an address,
/// an interface's name, or `any`: empty, every address); else the IPv4 address this host's name
/// resolves to, where that is one of its interfaces' and not a loopback, else the first address
/// (IPv4 first) of an interface that is up, running and not a loopback, else 127.0.0.1. A
/// FIBRA_LISTEN that names neither an address nor an interface of this host is warned about once
/// (agents on other hosts inherit the driver's) and the default is used.
std::string listen_address();

/// Connects to `host`:`port` (a name or an address), trying each address it resolves to for up to
/// `ms` each; an empty descriptor and `why` when none answers.
UniqueFd connect_to(const std::string& host, std::uint16_t port, int ms, std::string& why);

}  // namespace fibra::detail::tcp
