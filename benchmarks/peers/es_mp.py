#!/usr/bin/python3
"""The multiprocessing peer of fibra's ES job (jobs/es/es.cpp): the same OpenAI-ES on the same
CartPole-v1, written with Python's multiprocessing.Pool and NumPy, for the ES scaling figure
(benchmarks/es_scaling.py).

    /usr/bin/python3 benchmarks/peers/es_mp.py [--workers 4] [--population 256] [--sigma 0.1]
        [--lr 0.05] [--l2 0.005] [--hidden 16] [--generations 100] [--target 475]
        [--eval-episodes 100] [--seed 1]

The same algorithm, step for step, with the same seeds: CartPole-v1 with Gymnasium's dynamics
(jobs/envs/envs.hpp, jobs/envs/reference.py; plain Python floats, as Gymnasium's own step), a
tanh MLP (4-16-2) whose inputs are normalised by the observations' running mean and spread,
antithetic pairs whose noise is a stretch of a shared table of 2^22 N(0, 1) floats built once per
process from a seed (in the Pool's initializer; by the driver at its first gradient), centred ranks,
Adam with L2 decay. The generators are jobs/es/es_core.hpp's (splitmix64, Box-Muller), so theta's
start, the table, every offset and every episode's start are the fibra job's; returns then agree
with fibra's up to the rounding of NumPy's sums, which in a chaotic system can change a late action.
Each generation is one `Pool(n).map` over the pairs (default chunk size), the policy sent with each
pair as in the fibra job.

It prints the fibra job's lines (a `generation k:` line per generation with episodes/s and its time;
the final evaluation), so one parser reads both. No early stop other than the target, as the job.

The pool's workers are this process's children (start method fork). On SIGTERM, SIGINT or SIGHUP
they are SIGKILLed by pid before this process exits (128 + signal).
Standard library and NumPy only; run with Debian's /usr/bin/python3.
"""
import argparse
import math
import multiprocessing
import os
import signal
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one thread per process, as the fibra job's
os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402

# ---- jobs/es/es_core.hpp's generators, in Python integers and vectorised in NumPy ----

M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def splitmix_next(state):
    """(new state, output) of splitmix64."""
    state = (state + GAMMA) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


class Random:
    """es::Random: splitmix64 with uniform() in [0, 1) and Box-Muller normal()."""

    def __init__(self, seed):
        self.s = seed & M64

    def next(self):
        self.s, z = splitmix_next(self.s)
        return z

    def uniform(self):
        return (self.next() >> 11) * 2.0**-53

    def normal(self):
        u = 1.0 - self.uniform()
        v = self.uniform()
        return math.sqrt(-2.0 * math.log(u)) * math.cos(2.0 * math.pi * v)


def mix(a, b, c=0):
    """es::mix: a number that depends on its inputs alone."""
    rot = ((c << 32) | (c >> 32)) & M64
    return Random(((a * GAMMA) & M64) ^ ((b + 0x632BE59BD9B4E019) & M64) ^ rot).next()


TABLE_SIZE = 1 << 22  # es::NoiseTable::size: 16 MiB of float32


def build_noise_table(seed, chunk=1 << 20):
    """es::NoiseTable(seed): normal k from the generator's outputs 2k and 2k+1, float32."""
    out = np.empty(TABLE_SIZE, dtype=np.float32)
    gamma, seed = np.uint64(GAMMA), np.uint64(seed & M64)
    with np.errstate(over="ignore"):
        for start in range(0, TABLE_SIZE, chunk):
            k = np.arange(2 * start + 1, 2 * (start + chunk) + 1, dtype=np.uint64)  # the state after k calls
            z = seed + k * gamma
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
            uni = (z >> np.uint64(11)).astype(np.float64) * 2.0**-53
            u, v = 1.0 - uni[0::2], uni[1::2]
            out[start:start + chunk] = np.sqrt(-2.0 * np.log(u)) * np.cos((2.0 * math.pi) * v)
    return out


def noise_offset(pair_seed, n):
    """es::NoiseTable::offset."""
    return mix(pair_seed, 0x5EED) % (TABLE_SIZE - n + 1)


# ---- CartPole-v1 (jobs/envs/envs.hpp; Gymnasium's classic_control/cartpole.py) ----

OBS, ACTIONS, MAX_STEPS, SOLVED = 4, 2, 500, 475.0
GRAVITY, MASSCART, MASSPOLE, LENGTH, FORCE_MAG, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
TOTAL_MASS, POLEMASS_LENGTH = MASSPOLE + MASSCART, MASSPOLE * LENGTH
X_THRESHOLD, THETA_THRESHOLD = 2.4, 12 * 2 * math.pi / 360


def cartpole_reset(seed):
    """x, x_dot, theta, theta_dot each ~ U(-0.05, 0.05) from SplitMix64(seed), in that order."""
    s, out = seed & M64, []
    for _ in range(4):
        s, z = splitmix_next(s)
        out.append(-0.05 + 0.1 * ((z >> 11) * 2.0**-53))
    return out


def cartpole_step(x, x_dot, theta, theta_dot, action):
    force = FORCE_MAG if action == 1 else -FORCE_MAG
    c, s = math.cos(theta), math.sin(theta)
    temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * s) / TOTAL_MASS
    theta_acc = (GRAVITY * s - c * temp) / (LENGTH * (4.0 / 3.0 - MASSPOLE * (c * c) / TOTAL_MASS))
    x_acc = temp - POLEMASS_LENGTH * theta_acc * c / TOTAL_MASS
    return x + TAU * x_dot, x_dot + TAU * x_acc, theta + TAU * theta_dot, theta_dot + TAU * theta_acc


# ---- the policy and an episode (es_core.hpp's act() and episode()) ----


def parameters(hidden):
    return OBS * hidden + hidden + hidden * ACTIONS + ACTIONS


def episode(theta, mean, std, hidden, seed, seen):
    """One episode with parameters `theta` (already perturbed); its return and length. With `seen`
    (a list), appends the sums and squared sums of what it observed, and how many."""
    b1 = OBS * hidden
    w2 = b1 + hidden
    b2 = w2 + hidden * ACTIONS
    W1, B1 = theta[:b1].reshape(hidden, OBS), theta[b1:w2]
    W2, B2 = theta[w2:b2].reshape(ACTIONS, hidden), theta[b2:]
    state = cartpole_reset(seed)
    observed = [] if seen is not None else None
    ret, steps = 0.0, 0
    while True:
        if observed is not None:
            observed.append(state)
        x = np.clip((np.array(state) - mean) / std, -5.0, 5.0)
        action = int(np.argmax(W2 @ np.tanh(W1 @ x + B1) + B2))  # the first of equal outputs, as act()
        state = cartpole_step(*state, action)
        steps += 1
        ret += 1.0  # 1 per step, the terminating one too
        terminated = not (-X_THRESHOLD <= state[0] <= X_THRESHOLD and -THETA_THRESHOLD <= state[2] <= THETA_THRESHOLD)
        if terminated or steps >= MAX_STEPS:
            if observed is not None:
                o = np.array(observed)
                seen += [o.sum(axis=0), (o * o).sum(axis=0), float(len(observed))]
            return ret, steps


# ---- on a worker ----

TABLE = None  # this process's noise table


def init_worker(noise_seed):
    """The Pool's initializer: the shared noise table, built once in each worker process."""
    global TABLE
    TABLE = build_noise_table(noise_seed)


def evaluate_pair(task):
    """One antithetic pair: the returns of theta +- sigma * eps on the same episode, eps the table
    at `offset`; then the steps of both and the + episode's observation sums (as evaluate_pair in
    jobs/es/es.cpp)."""
    hidden, policy, offset, episode_seed, sigma = task
    n = parameters(hidden)
    theta, mean, std = policy[:n], policy[n:n + OBS], policy[n + OBS:]
    eps = TABLE[offset:offset + n].astype(np.float64)
    seen = []
    up, up_steps = episode(theta + sigma * eps, mean, std, hidden, episode_seed, seen)
    down, down_steps = episode(theta - sigma * eps, mean, std, hidden, episode_seed, None)
    return up, down, up_steps + down_steps, seen[0], seen[1], seen[2]


def evaluate_policy(task):
    hidden, policy, episode_seed = task
    n = parameters(hidden)
    return episode(policy[:n], policy[n:n + OBS], policy[n + OBS:], hidden, episode_seed, None)[0]


# ---- on the driver ----


class Run:
    """es::RunState and es::Adam: theta, the optimiser, the observations' sums."""

    def __init__(self, a):
        r = Random(mix(a.seed, 0x7417))
        self.theta = np.array([0.1 * r.normal() for _ in range(parameters(a.hidden))])
        self.m = np.zeros_like(self.theta)
        self.v = np.zeros_like(self.theta)
        self.t = 0.0
        self.obs_sum, self.obs_sumsq, self.obs_count = np.zeros(OBS), np.zeros(OBS), 0.0
        self.generation = 0

    def policy(self):
        """theta, then the observations' mean and standard deviation (0 and 1 before any)."""
        if self.obs_count > 0:
            mean = self.obs_sum / self.obs_count
            std = np.sqrt(np.maximum(self.obs_sumsq / self.obs_count - mean * mean, 1e-4))
        else:
            mean, std = np.zeros(OBS), np.ones(OBS)
        return np.concatenate([self.theta, mean, std])

    def adam(self, grad, lr, b1=0.9, b2=0.999, eps=1e-8):
        self.t += 1
        a = lr * math.sqrt(1 - b2**self.t) / (1 - b1**self.t)
        self.m = b1 * self.m + (1 - b1) * grad
        self.v = b2 * self.v + (1 - b2) * grad * grad
        self.theta = self.theta + a * self.m / (np.sqrt(self.v) + eps)


def centred_ranks(x):
    """Ranks mapped to [-0.5, 0.5], ties broken by position (a stable sort)."""
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[order] = np.arange(len(x)) / max(len(x) - 1, 1) - 0.5
    return r


DRIVER_TABLE = None


def step(pool, a, run):
    """One generation: one map over the pairs, then Adam on the centred-rank gradient. Returns the
    population's mean and best return and the steps it took."""
    global DRIVER_TABLE
    n, pairs = parameters(a.hidden), a.population // 2
    policy = run.policy()
    offsets, tasks = [], []
    for i in range(pairs):
        pair_seed = mix(a.seed, run.generation, i)
        offsets.append(noise_offset(pair_seed, n))
        tasks.append((a.hidden, policy, offsets[-1], mix(pair_seed, 0xE915), a.sigma))
    results = pool.map(evaluate_pair, tasks)

    returns = np.array([r[0] for r in results] + [r[1] for r in results])
    for r in results:
        run.obs_sum += r[3]
        run.obs_sumsq += r[4]
        run.obs_count += r[5]
    ranks = centred_ranks(returns)
    if DRIVER_TABLE is None:
        DRIVER_TABLE = build_noise_table(mix(a.seed, 0x401E))
    eps = np.stack([DRIVER_TABLE[o:o + n] for o in offsets]).astype(np.float64)
    grad = (ranks[:pairs] - ranks[pairs:]) @ eps / len(returns) - a.l2 * run.theta
    run.adam(grad, a.lr)
    return returns.mean(), returns.max(), sum(r[2] for r in results)


def evaluate(pool, a, policy):
    tasks = [(a.hidden, policy, mix(a.seed, 0xE7A1, k)) for k in range(a.eval_episodes)]
    r = np.array(pool.map(evaluate_policy, tasks))
    return r.mean(), r.std()


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--population", type=int, default=256)
    p.add_argument("--sigma", type=float, default=0.1)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--l2", type=float, default=0.005)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--generations", type=int, default=100)
    p.add_argument("--target", type=float, default=SOLVED)
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if a.population < 2 or a.population % 2:
        p.error("--population must be even and at least 2 (antithetic pairs)")
    if a.workers < 1 or a.generations < 0 or a.eval_episodes < 1 or a.hidden < 1:
        p.error("--workers, --eval-episodes and --hidden at least 1, --generations at least 0")
    return a


POOL = None


def on_signal(signum, _frame):
    if os.getpid() != MAIN_PID:  # a worker (fork copies the handler): just end
        os._exit(128 + signum)
    for p in list(POOL._pool) if POOL is not None else []:  # not terminate(): it may wait on the map's threads
        try:
            os.kill(p.pid, signal.SIGKILL)
        except (ProcessLookupError, TypeError):
            pass
    os._exit(128 + signum)


MAIN_PID = os.getpid()


def main():
    global POOL
    a = parse_args()
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    run = Run(a)
    POOL = pool = multiprocessing.get_context("fork").Pool(a.workers, initializer=init_worker,
                                                          initargs=(mix(a.seed, 0x401E),))
    print(f"es_mp: CartPole-v1, {a.workers} workers (multiprocessing.Pool, NumPy {np.__version__}), population "
          f"{a.population} ({a.population // 2} pairs), {parameters(a.hidden)} parameters, sigma {a.sigma:g}, "
          f"lr {a.lr:g}, seed {a.seed}, target {a.target:g}", flush=True)
    solved, last, wall = False, (0.0, 0.0), 0.0
    while run.generation < a.generations and not solved:
        t0 = time.perf_counter()
        mean, best, steps = step(pool, a, run)
        took = time.perf_counter() - t0
        wall += took
        run.generation += 1
        print(f"generation {run.generation:3d}: mean {mean:8.2f}  best {best:8.2f}  {a.population / took:7.0f} "
              f"episodes/s  {steps / took / 1e3:6.0f} k steps/s  ({took:.2f} s)", flush=True)
        if mean >= a.target:
            last = evaluate(pool, a, run.policy())
            solved = last[0] >= a.target
            print(f"  policy over {a.eval_episodes} episodes: {last[0]:.2f} +- {last[1]:.2f}"
                  + (": solved" if solved else ""), flush=True)
    if not solved:
        last = evaluate(pool, a, run.policy())
    reached = last[0] >= a.target
    print(f"es_mp: CartPole-v1 after {run.generation} generations ({wall:.1f} s of training): mean return "
          f"{last[0]:.2f} +- {last[1]:.2f} over {a.eval_episodes} episodes, target {a.target:g}: "
          f"{'reached' if reached else 'not reached'}", flush=True)
    pool.close()
    pool.join()
    POOL = None
    return 0 if reached else 1


if __name__ == "__main__":
    sys.exit(main())
