// Names docs/fault-tolerance.md uses without defining them (see check_blocks.cmake).
#pragma once

double rollout(double p);
FIBRA_REMOTE(rollout);
extern std::vector<double> params;
