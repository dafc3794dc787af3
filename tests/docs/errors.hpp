// Names docs/errors.md uses without defining them (see check_blocks.cmake).
#pragma once

extern fibra::Pool pool;
extern std::vector<int> inputs;

int crash_on(int item);
FIBRA_REMOTE(crash_on);
