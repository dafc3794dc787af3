# Sourced by the checkpoint kill tests (kill_test.sh, received_test.sh), which define fail().
# wait_gone MARK SECONDS WHAT: waits until no process has FIBRA_CKPT_KILL_MARK=MARK in its environment
# (a run's driver, and the agents and executors it started, which inherit it); fails naming WHAT
# when some are still there after SECONDS.
running_with() { grep -lszxF "FIBRA_CKPT_KILL_MARK=$1" /proc/[0-9]*/environ; }
wait_gone() {
  local t
  for ((t = 0; t < $2 * 10; t++)); do
    running_with "$1" >/dev/null || return 0
    sleep 0.1
  done
  fail "$3 still running after $2 s ($(running_with "$1" | tr '\n' ' '))"
}
