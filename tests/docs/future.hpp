// Names docs/future.md uses without defining them (see check_blocks.cmake).
#pragma once

extern fibra::Pool pool;

int sleepy(int ms);  // sleeps ms milliseconds, returns ms
FIBRA_REMOTE(sleepy);
long square(int x);
FIBRA_REMOTE(square);
int maybe_throw(int x);
FIBRA_REMOTE(maybe_throw);
