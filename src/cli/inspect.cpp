// src/cli/inspect.cpp: `fibra inspect <file>`, what a checkpoint holds.
#include "inspect.hpp"

#include <cstdio>
#include <memory>
#include <string>

#include "fibra/error.hpp"
#include "fibra/hdf5_io/store.hpp"

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

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* cmd =
      app.add_subcommand("inspect", "print what a checkpoint holds: the run, progress, when it was written");
  cmd->add_option("file", *path, "the checkpoint (.h5) file")->required();
  cmd->callback([path] {
    try {
      auto store = hdf5_io::Store::open(*path, hdf5_io::Access::read_only);
      print_info(store.info());
    } catch (const fibra::Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace fibra::cli
