// src/cli/inspect.cpp: `fibra inspect <file>`, what a checkpoint holds.
#include "inspect.hpp"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "fibra/error.hpp"
#include "fibra/hdf5_io/store.hpp"
#include "fibra/hdf5_io/tables.hpp"

namespace fibra::cli {

namespace {

std::string human_bytes(std::uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(n);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char text[32];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return text;
}

void print_info(const hdf5_io::Info& info) {
  const auto& run = info.run;
  const double percent = run.n_inputs ? 100.0 * double(info.n_done) / double(run.n_inputs) : 100.0;
  std::printf("checkpoint   %s (fibra-checkpoint format %u, generation %llu)\n", info.path.c_str(),
              hdf5_io::format_version, static_cast<unsigned long long>(info.generation));
  std::printf("function     %s\n", run.function.c_str());
  std::printf("inputs       %llu (fingerprint %s, chunksize %llu)\n", static_cast<unsigned long long>(run.n_inputs),
              run.inputs_fingerprint.c_str(), static_cast<unsigned long long>(run.chunksize));
  std::printf("results      %s\n", info.element_type.describe().c_str());
  std::printf("progress     %llu / %llu done (%.1f%%), %s\n", static_cast<unsigned long long>(info.n_done),
              static_cast<unsigned long long>(run.n_inputs), percent, info.state.c_str());
  std::printf("journal      %llu record%s (%s) not yet folded into the .h5 file\n",
              static_cast<unsigned long long>(info.journal_records), info.journal_records == 1 ? "" : "s",
              human_bytes(info.journal_bytes).c_str());
  std::printf("written by   fibra %s\n", run.fibra_version.c_str());
  std::printf("created      %s\n", info.created_at.c_str());
  std::printf("updated      %s\n", info.updated_at.c_str());
}

// A fibra::tune experiment's file (docs/tune.md): its trials by status, the best one, its rows.
bool print_experiment(const std::string& path) {
  hdf5_io::TableFile f;
  try {
    f = hdf5_io::read_table_file(path);
  } catch (const fibra::Error&) {
    return false;
  }
  auto attr = [&](const char* k) {
    auto it = f.attributes.find(k);
    return it == f.attributes.end() ? std::string() : it->second;
  };
  if (attr("format") != "fibra-tune") return false;
  const auto* trials = f.find("trials");
  const auto* results = f.find("results");
  if (!trials || !results) return false;
  const auto* status = trials->find("status");
  const auto* best = trials->find("best_metric");
  const auto* config = trials->find("config");
  if (!status || !best || !config) return false;
  const auto& st = std::get<std::vector<std::string>>(status->values);
  const auto& bm = std::get<std::vector<double>>(best->values);
  const auto& cf = std::get<std::vector<std::string>>(config->values);
  std::size_t done = 0, stopped = 0, errors = 0;
  for (const auto& s : st) done += s == "done", stopped += s == "stopped", errors += s == "error";
  const bool max = attr("mode") != "min";
  std::size_t at = st.size();
  for (std::size_t i = 0; i < bm.size(); ++i)
    if (bm[i] == bm[i] && (at == st.size() || (max ? bm[i] > bm[at] : bm[i] < bm[at]))) at = i;
  std::string metrics;
  for (const auto& c : results->columns)
    if (c.name != "trial" && c.name != "iteration" && c.name != "wall_time")
      metrics += (metrics.empty() ? "" : ", ") + c.name;
  std::printf("experiment   %s (fibra-tune)\n", path.c_str());
  std::printf("trainable    %s\n", attr("trainable").c_str());
  std::printf("search       %s samples, seed %s, scheduler %s, metric %s (%s)\n", attr("num_samples").c_str(),
              attr("seed").c_str(), attr("scheduler").c_str(), attr("metric").c_str(), max ? "max" : "min");
  std::printf("trials       %zu: %zu done, %zu stopped early, %zu errors, %zu running or waiting\n", st.size(), done,
              stopped, errors, st.size() - done - stopped - errors);
  if (at < st.size())
    std::printf("best         trial %zu: %s %.6g, %s\n", at, attr("metric").c_str(), bm[at], cf[at].c_str());
  std::printf("results      %zu rows; metrics: %s\n", results->columns.empty() ? 0 : results->columns[0].rows(),
              metrics.empty() ? "none" : metrics.c_str());
  std::printf("state        %s, %.1f s of wall time\n", attr("state").c_str(),
              std::strtod(attr("elapsed_s").c_str(), nullptr));
  return true;
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* cmd =
      app.add_subcommand("inspect",
                         "print what a checkpoint (or a fibra::tune experiment's file) holds: the run, progress, when "
                         "it was written");
  cmd->add_option("file", *path, "the checkpoint (.h5) file")->required();
  cmd->callback([path] {
    try {
      auto store = hdf5_io::Store::open(*path, hdf5_io::Access::read_only);
      print_info(store.info());
    } catch (const fibra::Error& e) {
      if (print_experiment(*path)) return;
      std::fprintf(stderr, "%s\n", e.what());
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace fibra::cli
