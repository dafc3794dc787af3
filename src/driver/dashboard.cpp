// The live page's server (src/driver/dashboard.hpp), on cpp-httplib.
#include "driver/dashboard.hpp"

#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <functional>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "common/log.hpp"
#include "common/private_file.hpp"
#include "common/unique_fd.hpp"
#include "driver/event_log.hpp"
#include "fibra/error.hpp"
#include <nlohmann/json.hpp>
#include "observe/event_reader.hpp"
#include "observe/metrics.hpp"
#include "transport/auth.hpp"
#include "observe/report.hpp"
#include "observe/status.hpp"

namespace fibra::detail {

namespace {

// Writes `text` to `path` as the only owner may read it (made anew: an old file, or a link put
// there, is replaced, never followed), saying where a failure leaves the user.
void write_private(const std::string& path, const std::string& text, const char* what) {
  try {
    write_private_file(path, text, std::string("the live page's ") + what, true);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string(e.what()) + ": name an event log folder of your own (PoolOptions::events)");
  }
}

// The folder holds the token: refused if it is not this user's alone to write (another user could
// put a page address of theirs in dashboard.url, or watch the token appear).
void check_folder_is_private(const std::string& folder) {
  struct stat st {};
  if (::stat(folder.c_str(), &st) != 0 || st.st_uid != ::getuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    throw ConfigError("fibra: the live page keeps its token in the event log's folder " + folder +
                      ", which must be yours and writable by you alone (chmod go-w, or name another folder)");
}

// A few threads for the page's requests, and a short queue: when both are full, the accept loop
// waits and further connections wait in the kernel's backlog, rather than each holding a
// descriptor of the driver's (an idle client is dropped after the read timeout).
class BoundedQueue : public httplib::TaskQueue {
 public:
  explicit BoundedQueue(std::size_t threads) {
    for (std::size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
  }
  void enqueue(std::function<void()> fn) override {
    std::unique_lock lk(mu_);
    room_.wait(lk, [&] { return jobs_.size() < most_queued || stopping_; });
    if (stopping_) return;
    jobs_.push_back(std::move(fn));
    ready_.notify_one();
  }
  void shutdown() override {
    {
      std::lock_guard lk(mu_);
      stopping_ = true;
    }
    ready_.notify_all();
    room_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  static constexpr std::size_t most_queued = 16;
  void work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock lk(mu_);
        ready_.wait(lk, [&] { return !jobs_.empty() || stopping_; });
        if (jobs_.empty()) return;
        fn = std::move(jobs_.front());
        jobs_.pop_front();
      }
      room_.notify_one();
      fn();
    }
  }
  std::mutex mu_;
  std::condition_variable ready_, room_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// The page itself: no data in it; its script asks for the token (or takes it from the address's
// #token=...), then fetches the state and the report every 2 s with it.
constexpr const char* shell_page = R"(<!DOCTYPE html><html><head><meta charset="utf-8"><title>fibra: live</title>
<style>body{font:14px/1.4 system-ui,sans-serif;margin:16px}pre{background:#f6f6f6;padding:8px}
iframe{width:100%;height:80vh;border:1px solid #ccc}#why{color:#b00}</style></head><body>
<h1>fibra: live</h1>
<p><label>token (dashboard.token) <input id="token" type="password" size="70"></label> <span id="why"></span></p>
<pre id="status">waiting for the token</pre>
<iframe id="report" title="report" sandbox="allow-scripts"></iframe>
<script>
const box = document.getElementById('token');
const m = location.hash.match(/token=([0-9a-f]+)/);
if (m) { box.value = m[1]; history.replaceState(null, '', location.pathname); }
async function get(path) {
  const r = await fetch(path, {headers: {Authorization: 'Bearer ' + box.value.trim()}});
  if (!r.ok) throw new Error(r.status + ' ' + (await r.text()));
  return r;
}
async function refresh() {
  if (!box.value) return;
  try {
    const s = await (await get('/status.json')).json();
    document.getElementById('status').textContent = s.status;
    document.getElementById('report').srcdoc = await (await get('/report')).text();
    document.getElementById('why').textContent = '';
  } catch (e) { document.getElementById('why').textContent = String(e); }
}
refresh();
setInterval(refresh, 2000);
</script></body></html>
)";

}  // namespace

struct Dashboard::Impl {
  httplib::Server server;
  std::thread thread;
  std::string token, url;
  std::set<std::string> hosts;  // Host headers that name this page
  std::mutex mu;                // the follower's
  std::unique_ptr<observe::EventLogFollower> follower;

  // Refuses a request with a foreign Host or without the token (the shell page needs no token).
  httplib::Server::HandlerResponse check(const httplib::Request& req, httplib::Response& res) {
    if (req.method != "GET" && req.method != "HEAD") {
      res.status = 405;
      res.set_header("Allow", "GET, HEAD");
      res.set_content("fibra: the live page only answers GET\n", "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!hosts.count(req.get_header_value("Host"))) {
      res.status = 403;
      res.set_content("fibra: this page answers only to its own address (Host header)\n", "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.path == "/") return httplib::Server::HandlerResponse::Unhandled;
    const std::string bearer = req.get_header_value("Authorization");
    if (bearer.rfind("Bearer ", 0) != 0 || !auth::same_bytes(std::string_view(bearer).substr(7), token)) {
      res.status = 401;
      res.set_header("WWW-Authenticate", "Bearer");
      res.set_content("fibra: send the token in dashboard.token as Authorization: Bearer <token>\n", "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  }

  // What the log says now; a page made before is served again while the log gained nothing.
  std::map<std::string, std::string> made;  // by path, under mu
  template <class F>
  void answer(const httplib::Request& req, httplib::Response& res, const char* type, F make) {
    std::lock_guard lk(mu);
    if (follower->poll()) made.clear();
    if (follower->log().segments.empty()) {
      res.status = 503;
      res.set_content("fibra: the event log has no event yet\n", "text/plain");
      return;
    }
    auto it = made.find(req.path);
    if (it == made.end() || req.path == "/status.json")
      it = made.insert_or_assign(req.path, make(follower->log())).first;
    res.set_content(it->second, type);
  }
};

Dashboard::Dashboard(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::shared_ptr<Dashboard> Dashboard::open(const std::string& address, const std::string& events_folder) {
  static std::mutex mu;
  static std::map<std::pair<std::string, std::string>, std::weak_ptr<Dashboard>> open_pages;  // (address, folder)
  std::lock_guard lk(mu);
  std::error_code ec;
  const std::string folder_key =
      std::filesystem::weakly_canonical(std::filesystem::absolute(events_folder), ec).string();
  if (auto it = open_pages.find({address, folder_key}); it != open_pages.end())
    if (auto page = it->second.lock()) return page;
  const auto colon = address.rfind(':');
  std::string host = colon == std::string::npos || colon == 0 ? "127.0.0.1" : address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);  // [::1]
  const std::string port_text = colon == std::string::npos ? address : address.substr(colon + 1);
  int port = -1;
  try {
    std::size_t used = 0;
    port = std::stoi(port_text, &used);
    if (used != port_text.size()) port = -1;
  } catch (const std::exception&) {
  }
  if (port < 0 || port > 65535)
    throw ConfigError("fibra: the live page's address '" + address +
                      "' is not host:port (PoolOptions::dashboard or FIBRA_DASHBOARD; 127.0.0.1:8265, or 0 for a free "
                      "port)");
  check_folder_is_private(events_folder);
  auto impl = std::make_unique<Impl>();
  impl->token = auth::Secret::random().hex();  // 32 random bytes, as 64 hexadecimal digits
  impl->follower = std::make_unique<observe::EventLogFollower>(events_folder);
  httplib::Server& server = impl->server;
  // Not SO_REUSEPORT (cpp-httplib's default on Linux): a second page on a port in use must fail,
  // not share its connections.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  server.new_task_queue = [] { return new BoundedQueue(4); };
  server.set_read_timeout(2);
  server.set_keep_alive_timeout(2);
  server.set_payload_max_length(0);  // it takes no body
  server.set_pre_routing_handler(
      [m = impl.get()](const httplib::Request& req, httplib::Response& res) { return m->check(req, res); });
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Content-Security-Policy",
                   "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'");
    res.set_header("X-Frame-Options", "DENY");
    res.set_content(shell_page, "text/html");
  });
  server.Get("/status.json", [m = impl.get()](const httplib::Request& req, httplib::Response& res) {
    m->answer(req, res, "application/json", [](const observe::EventLogRecord& log) {
      const nlohmann::json status = {{"status", observe::status_text(log, event_time_us())},
                                     {"live", observe::run_is_live(log)}};
      return status.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    });
  });
  server.Get("/report", [m = impl.get()](const httplib::Request& req, httplib::Response& res) {
    m->answer(req, res, "text/html", [](const observe::EventLogRecord& log) { return observe::html_report(log); });
  });
  server.Get("/metrics", [m = impl.get()](const httplib::Request& req, httplib::Response& res) {
    m->answer(req, res, "text/plain; version=0.0.4",
              [](const observe::EventLogRecord& log) { return observe::prometheus_text(log); });
  });
  port = port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
  if (port <= 0)
    throw ConfigError("fibra: the live page cannot listen on " + address +
                      " (in use, or not an address of this host): name another (PoolOptions::dashboard or "
                      "FIBRA_DASHBOARD; port 0 takes a free one)");
  const std::string shown = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  for (const std::string& h : {shown, std::string("localhost"), std::string("127.0.0.1"), std::string("[::1]")})
    impl->hosts.insert(h + ":" + std::to_string(port));
  impl->url = "http://" + shown + ":" + std::to_string(port) + "/";
  impl->thread = std::thread([m = impl.get()] { m->server.listen_after_bind(); });
  // From here the page stops and its thread ends with `page`, whatever throws below. stop() does
  // nothing before the server runs: wait for that (it does at once, unless the thread cannot start).
  std::shared_ptr<Dashboard> page(new Dashboard(std::move(impl)));
  for (int i = 0; i < 5000 && !page->impl_->server.is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto folder = std::filesystem::path(events_folder);
  write_private((folder / "dashboard.token").string(), page->impl_->token + "\n", "token");
  write_private((folder / "dashboard.url").string(), page->url() + "\n", "address");
  open_pages[{address, folder_key}] = page;
  log::info("fibra: the live page is at {} (its token is in {})", page->url(), (folder / "dashboard.token").string());
  return page;
}

Dashboard::~Dashboard() {
  for (int i = 0; i < 5000 && impl_->thread.joinable() && !impl_->server.is_running(); ++i)  // (as open() waits)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

const std::string& Dashboard::url() const { return impl_->url; }

}  // namespace fibra::detail
