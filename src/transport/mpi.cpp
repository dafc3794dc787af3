#include "transport/mpi.hpp"

#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "fibra/detail/codec.hpp"
#include "fibra/error.hpp"

namespace fibra::mpi {

std::string error_text(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<std::size_t>(len));
}

void check(int rc, const char* call) {
  if (rc != MPI_SUCCESS) throw MpiError(std::string("fibra: ") + call + " failed: " + error_text(rc));
}

Info::~Info() {
  if (info_ != MPI_INFO_NULL) MPI_Info_free(&info_);
}

void Info::set(const char* key, const char* value) {
  if (info_ == MPI_INFO_NULL) check(MPI_Info_create(&info_), "MPI_Info_create");
  check(MPI_Info_set(info_, key, value), "MPI_Info_set");
}

std::recursive_mutex& lock() {
  static std::recursive_mutex m;
  return m;
}

bool try_recv(MPI_Comm comm, Message& m, int source) {
  int flag = 0;
  MPI_Status st;
  // An Iprobe that finds nothing reads the socket only afterwards, while answering "no": probe
  // twice, or a message that arrived during a nap waits for the next wake-up.
  check(MPI_Iprobe(source, MPI_ANY_TAG, comm, &flag, &st), "MPI_Iprobe");
  if (!flag) check(MPI_Iprobe(source, MPI_ANY_TAG, comm, &flag, &st), "MPI_Iprobe");
  if (!flag) return false;
  int n = 0;
  check(MPI_Get_count(&st, MPI_BYTE, &n), "MPI_Get_count");
  m.source = st.MPI_SOURCE;
  m.tag = st.MPI_TAG;
  detail::resize_large(m.data, static_cast<std::size_t>(n));
  check(MPI_Recv(m.data.data(), n, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, comm, MPI_STATUS_IGNORE), "MPI_Recv");
  return true;
}

SendQueue::~SendQueue() { abandon(); }

namespace {
void check_size(std::size_t n) {
  if (n > static_cast<std::size_t>(INT32_MAX))
    throw MpiError("fibra: a message of " + std::to_string(n) +
                   " bytes is over MPI's 2 GiB limit: use a smaller chunksize");
}
constexpr std::size_t join_below = 1 << 20;  // smaller bodies are copied: one buffer is cheaper then
}  // namespace

std::size_t Pieces::size() const {
  std::size_t n = heads.size();
  for (const auto& b : bodies) n += b.bytes.size();
  return n;
}

void Pieces::write_to(char* out) const {
  std::size_t at = 0;
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    out = std::copy(heads.data() + at, heads.data() + ends[i], out);
    detail::copy_large(out, bodies[i].bytes.data(), bodies[i].bytes.size());  // split across cores when large
    out += bodies[i].bytes.size();
    at = ends[i];
  }
  std::copy(heads.data() + at, heads.data() + heads.size(), out);
}

std::string Pieces::joined() const {
  std::string s(size(), '\0');  // joined only below join_below bytes: the zero fill is nothing
  write_to(s.data());
  return s;
}

void SendQueue::send(MPI_Comm comm, int dest, int tag, std::string data) {
  check_size(data.size());
  auto p = std::make_unique<Pending>();
  p->data = std::move(data);
  p->comm = comm;
  const void* buf = p->data.data();
  const int count = static_cast<int>(p->data.size());
  start(std::move(p), tag, dest, MPI_BYTE, buf, count);
}

void SendQueue::send(MPI_Comm comm, int dest, int tag, Pieces pieces) {
  const std::size_t total = pieces.size();
  check_size(total);
  if (total - pieces.heads.size() < join_below) return send(comm, dest, tag, pieces.joined());
  auto p = std::make_unique<Pending>();
  p->pieces = std::move(pieces);
  p->comm = comm;
  // One hindexed datatype over the pieces' addresses: MPI reads each where it is.
  const Pieces& q = p->pieces;
  std::vector<int> lengths;
  std::vector<MPI_Aint> where;
  auto add = [&](const char* b, std::size_t n) {
    if (n == 0) return;
    MPI_Aint a;
    check(MPI_Get_address(b, &a), "MPI_Get_address");
    lengths.push_back(static_cast<int>(n));
    where.push_back(a);
  };
  std::size_t at = 0;
  for (std::size_t i = 0; i < q.bodies.size(); ++i) {
    add(q.heads.data() + at, q.ends[i] - at);
    add(q.bodies[i].bytes.data(), q.bodies[i].bytes.size());
    at = q.ends[i];
  }
  add(q.heads.data() + at, q.heads.size() - at);
  MPI_Datatype type;
  check(MPI_Type_create_hindexed(static_cast<int>(lengths.size()), lengths.data(), where.data(), MPI_BYTE, &type),
        "MPI_Type_create_hindexed");
  check(MPI_Type_commit(&type), "MPI_Type_commit");
  try {
    start(std::move(p), tag, dest, type, MPI_BOTTOM, 1);
  } catch (...) {
    MPI_Type_free(&type);
    throw;
  }
  MPI_Type_free(&type);  // the send under way keeps what it needs of it
}

void SendQueue::start(std::unique_ptr<Pending> p, int tag, int dest, MPI_Datatype type, const void* buf, int count) {
  p->dest = dest;
  p->tag = tag;
  check(MPI_Isend(buf, count, type, dest, tag, p->comm, &p->request), "MPI_Isend");
  // Open MPI's TCP transport writes a queued message only while MPI makes progress: test once
  // now, or a small message waits for the sender's next MPI call.
  int done = 0;
  const int rc = MPI_Test(&p->request, &done, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) {
    (void)p.release();  // MPI may still read its buffers: leak them, as abandon() does
    check(rc, "MPI_Test");
  }
  if (!done) pending_.push_back(std::move(p));
}

std::size_t SendQueue::progress(const std::function<void(MPI_Comm, int, const std::string&)>& on_error) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    int done = 0;
    const int rc = MPI_Test(&(*it)->request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      if (!on_error) check(rc, "MPI_Test");
      const MPI_Comm comm = (*it)->comm;
      const int dest = (*it)->dest;
      (void)it->release();  // MPI may still hold the buffer: leak it, as abandon() does
      it = pending_.erase(it);
      on_error(comm, dest, "MPI_Test failed: " + error_text(rc));
      continue;
    }
    it = done ? pending_.erase(it) : it + 1;
  }
  return pending_.size();
}

std::size_t SendQueue::drain(double seconds) {
  const double end = now_s() + seconds;
  while (progress() > 0 && now_s() < end) std::this_thread::sleep_for(std::chrono::microseconds(200));
  return pending_.size();
}

void SendQueue::abandon() noexcept {
  // A send to a peer that is gone never completes; its buffer must then outlive MPI, so leak it.
  for (auto& p : pending_) {
    int done = 0;
    if (MPI_Test(&p->request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) continue;
    (void)p.release();
  }
  pending_.clear();
}

void SendQueue::abandon(MPI_Comm comm, int dest, int first_tag, int end_tag) noexcept {
  // The request is left to MPI (never tested again) and its buffer leaked: testing a send to a
  // dead peer drives the TCP transport at a dead socket.
  for (auto it = pending_.begin(); it != pending_.end();) {
    if ((*it)->comm == comm && (*it)->dest == dest && (*it)->tag >= first_tag && (*it)->tag < end_tag) {
      (void)it->release();
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

namespace {
std::atomic<bool> g_recovery{false};
}  // namespace

void note_recovery() noexcept {
  // Set by the user (or passed on by mpirun): as it says. Unset: on for ./app, where fibra sets it
  // before MPI_Init; off under a launcher, which read its own settings already.
  if (const char* v = std::getenv("OMPI_MCA_orte_enable_recovery"))
    g_recovery = std::strcmp(v, "1") == 0 || std::strcmp(v, "true") == 0 || std::strcmp(v, "yes") == 0;
  else
    g_recovery = !std::getenv("OMPI_COMM_WORLD_SIZE");
}
bool recovery_enabled() noexcept { return g_recovery.load(); }

void precise_sleeps() noexcept { ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL); }

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace fibra::mpi
