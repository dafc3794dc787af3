// Names docs/pool.md uses without defining them (see check_blocks.cmake).
#pragma once

extern fibra::Pool pool;
extern std::vector<int> inputs;

double rollout(double p);
FIBRA_REMOTE(rollout);
extern std::vector<double> params;

struct Logger {
  void write(std::string_view line);
};
extern Logger my_logger;
