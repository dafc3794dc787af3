// src/driver/dashboard.hpp: the live page of a run (PoolOptions::dashboard, FIBRA_DASHBOARD),
// served by the driver from its own event log (src/observe/ makes what it shows): the run's state,
// the report's views, /metrics in Prometheus' text format and a JSON status, refreshed every 2 s.
//
// Nobody else's: every request needs the token kept in <events>/dashboard.token (mode 0600), as
// `Authorization: Bearer <token>`, compared in constant time; and a Host header naming the page's
// own address, so that a web page elsewhere cannot reach it through its name (DNS rebinding). Only
// the page's empty shell, which asks for the token, is served without it. 127.0.0.1 unless the
// address names another host.
#pragma once

#include <memory>
#include <string>

namespace fibra::detail {

class Dashboard {
 public:
  /// The page of the run whose event log is in `events_folder`, served at `address` ("host:port"
  /// or "port"; port 0: a free one), shared by the pools of this process that name the same
  /// address. Writes `dashboard.url` and `dashboard.token` in the folder and says the address.
  /// @throws ConfigError naming the address or the file, if it cannot listen or write there.
  static std::shared_ptr<Dashboard> open(const std::string& address, const std::string& events_folder);
  ~Dashboard();  ///< stops serving
  Dashboard(const Dashboard&) = delete;
  Dashboard& operator=(const Dashboard&) = delete;

  /// "http://127.0.0.1:8265/".
  const std::string& url() const;

  struct Impl;

 private:
  explicit Dashboard(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fibra::detail
