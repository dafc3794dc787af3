#!/usr/bin/python3
"""The Python peer of fibra's PPO (issue 47, benchmark B11, time to solve CartPole-v1): CleanRL's
ppo.py written with Debian's python3-torch and multiprocessing, over CartPole-v1 in NumPy, with the
hyper-parameters of rl-baselines3-zoo's CartPole-v1 PPO.

    /usr/bin/python3 benchmarks/peers/ppo_peer.py [--workers 4] [--seed 1] [--csv curve.csv]
        [--n-envs 8] [--n-steps 32] [--batch-size 256] [--n-epochs 20] [--gamma 0.98]
        [--gae-lambda 0.8] [--lr 0.001] [--clip-range 0.2] [--ent-coef 0] [--vf-coef 0.5]
        [--max-grad-norm 0.5] [--total-steps 200000] [--target 475] [--eval-episodes 100] ...
        (--help lists them all; the header line prints every value)

Rollouts run in `--workers` processes (multiprocessing, start method fork), each holding its share
of the n_envs environment copies and a torch copy of the policy (one thread per process). Every
iteration the learner (this process) sends each worker the weights (numpy arrays) and the
observation statistics; each worker steps its copies n_steps times (a fragment: episodes go on
across iterations) and sends back numpy arrays; the learner merges them in the order of the copies'
global indices, computes GAE and runs the PPO epochs. `--workers 0` samples in this process.
It stops when the mean return of the last 20 finished training episodes reaches --target and then a
greedy evaluation (argmax) of --eval-episodes episodes in this process does too; a failed
evaluation lets training go on. It prints a line per iteration (steps/s: the iteration's steps over
its sampling and learning time), then `mean return X +- Y over 100 episodes` (the last greedy
evaluation; Y the population standard deviation) and `solved in S environment steps, W.WW s` or
`not solved within S steps`; exit 0 only if solved. Wall time counts from the start of training
(the workers forked and ready) and includes the evaluations; start-up is printed apart.

As fibra's PPO (rl/: VectorEnv, Sampler, Policy, ObsNormaliser): CartPole-v1 with Gymnasium's
dynamics and constants (jobs/envs/envs.hpp, reference.py: Euler, terminated at |x| > 2.4 or |theta| >
12 degrees, reward 1 on every step the terminating one included, truncated at 500 steps), same-step
autoreset; the episode starts of fibra's VectorEnv (copy g's seed s_g is the g-th output of
splitmix64(seed), its episode k starts from 4 uniforms in [-0.05, 0.05) of
splitmix64(splitmix64(s_g + k).next())); an action drawn per copy by inverse CDF from a splitmix64
uniform, as Policy::act; separate actor and critic tanh MLPs, orthogonal init (gains sqrt(2), 0.01
for the actor's head, 1 for the critic's); NormalizeObservation's normalisation (clip((x - mean) /
sqrt(var + 1e-8), -10, 10), population variance) with statistics frozen during a fragment: workers
send the moments of the raw observations their policy saw, per copy, and the learner merges them
(Chan et al.) in copy order and ships the result with the next weights.
Not as fibra: inference in torch (fibra's workers run their own float32 C++ kernels, log-softmax in
double; here torch's float32 throughout), NumPy's cos/sin, torch's orthogonal init and minibatch
shuffles (torch generators seeded with --seed), the action generator's seed (mix(s_g, 0xAC7)), the
evaluation's starts (the k-th output of splitmix64(mix(seed, 0xE7A1))): numbers differ,
distributions do not. As fibra promises, a seed gives the same learning curve for any --workers
(per-copy generators, moments merged per copy in copy order; checked: 0, 3 and 4 workers agree).
Against CleanRL's ppo.py and SB3 (what the zoo's hyper-parameters were tuned on):
- value loss vf_coef * mean((V - R)^2), SB3's form (CleanRL halves it); --clip-vloss clips it
  CleanRL's way with the current clip range (SB3's clip_range_vf is off in the zoo, as here).
- truncation bootstrapped SB3's way (reward += gamma * V(final observation)); CleanRL's ppo.py
  treats a truncation as a termination.
- clip range annealed linearly like the learning rate (the zoo's lin_0.2; CleanRL keeps it fixed);
  both anneal CleanRL's way, frac = 1 - steps before the iteration / --anneal-steps (default
  --total-steps; the zoo's schedules run over its n_timesteps, 100,000: pass --anneal-steps 100000).
- minibatches of --batch-size from a shuffle of the n_envs * n_steps batch (SB3's batch_size; a
  short last one kept), one Adam step each (eps 1e-5), gradients clipped to --max-grad-norm.
- observation statistics updated once per iteration, not per step as VecNormalize and
  NormalizeObservation do; before the first merge the policy sees raw observations (mean 0, var 1).
- the stop rule: the zoo and CleanRL train for a budget; here the run stops once solved.

On SIGTERM, SIGINT or SIGHUP the workers are SIGKILLed by pid before this process exits (128 +
signal); every wait for a worker is bounded by --worker-timeout and names the worker that did not
answer. Standard library, NumPy and torch only; run with Debian's /usr/bin/python3.
"""
import argparse
import collections
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
import traceback

for _knob in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_knob, "1")  # one thread per process
_IMPORT_START = time.perf_counter()
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

IMPORT_S = time.perf_counter() - _IMPORT_START
torch.set_num_threads(1)

# ---- fibra's generator (envs::SplitMix64, fibra::rl::Rng) and es_mp.py's mix ----

M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


class Random:
    """splitmix64 with uniform() in [0, 1): the top 53 bits."""

    def __init__(self, seed):
        self.s = seed & M64

    def next(self):
        self.s = (self.s + GAMMA) & M64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    def uniform(self):
        return (self.next() >> 11) * 2.0**-53


def mix(a, b, c=0):
    """A number that depends on its inputs alone (es::mix)."""
    rot = ((c << 32) | (c >> 32)) & M64
    return Random(((a * GAMMA) & M64) ^ ((b + 0x632BE59BD9B4E019) & M64) ^ rot).next()


# ---- CartPole-v1, N copies in NumPy (jobs/envs/envs.hpp; Gymnasium's classic_control/cartpole.py) ----

OBS, ACTIONS, MAX_STEPS, SOLVED = 4, 2, 500, 475.0
GRAVITY, MASSCART, MASSPOLE, LENGTH, FORCE_MAG, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
TOTAL_MASS, POLEMASS_LENGTH = MASSPOLE + MASSCART, MASSPOLE * LENGTH
X_THRESHOLD, THETA_THRESHOLD = 2.4, 12 * 2 * math.pi / 360


def cartpole_start(seed):
    """envs::CartPole::reset(seed): x, x_dot, theta, theta_dot each U(-0.05, 0.05), in that order."""
    r = Random(seed)
    return [-0.05 + 0.1 * r.uniform() for _ in range(OBS)]


def episode_start(copy_seed, k):
    """Episode k of the copy whose seed is copy_seed, as fibra's VectorEnv."""
    return cartpole_start(Random(copy_seed + k).next())


def cartpole_step(state, actions):
    """One Euler step of every row of `state` (rows x, x_dot, theta, theta_dot); the new states and
    whether each terminated."""
    x, x_dot, theta, theta_dot = state.T
    force = np.where(actions == 1, FORCE_MAG, -FORCE_MAG)
    c, s = np.cos(theta), np.sin(theta)
    temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * s) / TOTAL_MASS
    theta_acc = (GRAVITY * s - c * temp) / (LENGTH * (4.0 / 3.0 - MASSPOLE * (c * c) / TOTAL_MASS))
    x_acc = temp - POLEMASS_LENGTH * theta_acc * c / TOTAL_MASS
    new = np.stack([x + TAU * x_dot, x_dot + TAU * x_acc, theta + TAU * theta_dot, theta_dot + TAU * theta_acc], axis=1)
    terminated = (np.abs(new[:, 0]) > X_THRESHOLD) | (np.abs(new[:, 2]) > THETA_THRESHOLD)
    return new, terminated


# ---- the policy (CleanRL's Agent) and the observation statistics ----


def layer(n_in, n_out, gain):
    """CleanRL's layer_init: orthogonal weights with `gain`, zero bias."""
    lin = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(lin.weight, gain)
    nn.init.constant_(lin.bias, 0.0)
    return lin


def mlp(hidden, outputs, head_gain):
    layers, n_in = [], OBS
    for h in hidden:
        layers += [layer(n_in, h, math.sqrt(2)), nn.Tanh()]
        n_in = h
    return nn.Sequential(*layers, layer(n_in, outputs, head_gain))


class Agent(nn.Module):
    """Separate actor (logits of a categorical) and critic MLPs, built critic first as CleanRL's."""

    def __init__(self, hidden):
        super().__init__()
        self.critic = mlp(hidden, 1, 1.0)
        self.actor = mlp(hidden, ACTIONS, 0.01)


class Moments:
    """Count, mean and M2 (sum of squared deviations) of observation rows; merge() is Chan et al.'s."""

    def __init__(self):
        self.count, self.mean, self.m2 = 0, np.zeros(OBS), np.zeros(OBS)

    def merge(self, count, mean, m2):
        if count == 0:
            return
        if self.count == 0:
            self.count, self.mean, self.m2 = count, mean.copy(), m2.copy()
            return
        n = self.count + count
        d = mean - self.mean
        self.mean = self.mean + d * (count / n)
        self.m2 = self.m2 + m2 + d * d * (self.count * count / n)
        self.count = n

    def variance(self):
        """The population variance; 1 before any row (NormalizeObservation's start, without its 1e-4 count)."""
        return self.m2 / self.count if self.count else np.ones(OBS)


def normalise(raw, stats):
    """stats = (mean, var, clip, eps), or None to pass observations through; float32 rows."""
    if stats is None:
        return raw.astype(np.float32)
    mean, var, clip, eps = stats
    return np.clip((raw - mean) / np.sqrt(var + eps), -clip, clip).astype(np.float32)


# ---- rollouts: the same code in a worker process and in this one (--workers 0) ----


class Sampler:
    """Copies first..first+n-1 of the run's n_envs, stepped together with a copy of the policy."""

    def __init__(self, first, n, seed, hidden):
        master = Random(seed)
        all_seeds = [master.next() for _ in range(first + n)]
        self.first, self.n = first, n
        self.copy_seeds = all_seeds[first:]
        self.rngs = [Random(mix(s, 0xAC7)) for s in self.copy_seeds]  # the action draws
        self.episodes = [0] * n
        self.state = np.array([episode_start(s, 0) for s in self.copy_seeds])
        self.steps = np.zeros(n, dtype=np.int64)
        self.returns = np.zeros(n)
        self.agent = Agent(hidden)
        self.agent.requires_grad_(False)
        self.stats = None

    def set_policy(self, weights, stats):
        self.agent.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
        self.stats = stats

    def act(self, obs):
        """Actions drawn per copy by inverse CDF from its own generator (as fibra's Policy::act),
        their log-probabilities and the values."""
        o = torch.from_numpy(obs)
        logp = torch.log_softmax(self.agent.actor(o), dim=-1).numpy()
        values = self.agent.critic(o).numpy()[:, 0]
        actions = np.empty(self.n, dtype=np.int64)
        for i in range(self.n):
            u, a = self.rngs[i].uniform(), 0
            cumulative = math.exp(logp[i, 0])
            while a + 1 < ACTIONS and u >= cumulative:
                a += 1
                cumulative += math.exp(logp[i, a])
            actions[i] = a
        return actions, logp[np.arange(self.n), actions], values

    def sample(self, n_steps):
        """A fragment of n_steps steps of every copy, as numpy arrays indexed [t][copy]."""
        n = self.n
        f = dict(obs=np.empty((n_steps, n, OBS), np.float32), actions=np.empty((n_steps, n), np.int64),
                 logp=np.empty((n_steps, n), np.float32), values=np.empty((n_steps, n), np.float32),
                 rewards=np.empty((n_steps, n), np.float32), terminated=np.zeros((n_steps, n), bool),
                 truncated=np.zeros((n_steps, n), bool),
                 final_values=np.zeros((n_steps, n), np.float32), finished=[])
        raw = np.empty((n_steps, n, OBS))
        with torch.inference_mode():
            for t in range(n_steps):
                raw[t] = self.state
                f["obs"][t] = normalise(self.state, self.stats)
                f["actions"][t], f["logp"][t], f["values"][t] = self.act(f["obs"][t])
                self.state, terminated = cartpole_step(self.state, f["actions"][t])
                self.steps += 1
                f["rewards"][t] = 1.0  # every step, the terminating one too
                self.returns += f["rewards"][t]
                truncated = self.steps >= MAX_STEPS
                f["terminated"][t], f["truncated"][t] = terminated, truncated
                bootstrap = np.flatnonzero(truncated & ~terminated)
                if bootstrap.size:  # V(final observation), before the reset replaces it
                    obs = torch.from_numpy(normalise(self.state[bootstrap], self.stats))
                    f["final_values"][t, bootstrap] = self.agent.critic(obs).numpy()[:, 0]
                for i in np.flatnonzero(terminated | truncated):
                    f["finished"].append((t, self.first + i, float(self.returns[i]), int(self.steps[i])))
                    self.episodes[i] += 1
                    self.state[i] = episode_start(self.copy_seeds[i], self.episodes[i])
                    self.steps[i], self.returns[i] = 0, 0.0
            f["last_values"] = self.agent.critic(torch.from_numpy(normalise(self.state, self.stats))).numpy()[:, 0]
        mean = raw.mean(axis=0)  # per copy: the moments of the raw observations its policy saw
        f["moments"] = (n_steps, mean, ((raw - mean) ** 2).sum(axis=0))
        return f


def worker_main(conn, index, first, n, a, parent_pid):
    """A rollout worker: ready, then a fragment for every policy it receives, until "stop"."""
    torch.set_num_threads(1)
    try:
        sampler = Sampler(first, n, a.seed, a.hidden)
        conn.send(("ready", os.getpid()))
        while True:
            while not conn.poll(1.0):
                if os.getppid() != parent_pid:  # the learner is gone
                    os._exit(1)
            msg = conn.recv()
            if msg[0] == "stop":
                return
            sampler.set_policy(msg[1], msg[2])
            conn.send(("fragment", sampler.sample(a.n_steps)))
    except (EOFError, BrokenPipeError):
        os._exit(1)
    except Exception:  # noqa: BLE001: shipped to the learner, which names this worker
        conn.send(("error", traceback.format_exc()))


class WorkerError(RuntimeError):
    pass


class Workers:
    """The rollout processes, each with its pipe; every wait bounded by `timeout` seconds."""

    def __init__(self, a, shares):
        self.timeout = a.worker_timeout
        ctx = multiprocessing.get_context("fork")
        self.procs, self.conns = [], []
        for index, (first, n) in enumerate(shares):
            parent_end, child_end = ctx.Pipe()
            p = ctx.Process(target=worker_main, args=(child_end, index, first, n, a, os.getpid()),
                            name=f"ppo-worker-{index}", daemon=True)
            p.start()
            CHILDREN.append(p)
            child_end.close()
            self.procs.append(p)
            self.conns.append(parent_end)
        try:
            self.gather("ready")
        except BaseException:  # a half-started set of workers is torn down
            self.kill()
            raise

    def describe(self, i):
        return f"worker {i} of {len(self.procs)} (pid {self.procs[i].pid})"

    def gather(self, kind):
        """One answer of `kind` from every worker, in worker order; raises WorkerError naming who
        failed, exited or did not answer within the timeout."""
        pending, out = dict(enumerate(self.conns)), [None] * len(self.conns)
        deadline = time.monotonic() + self.timeout
        while pending:
            ready = multiprocessing.connection.wait(list(pending.values()), max(0.0, deadline - time.monotonic()))
            if not ready:
                who = ", ".join(self.describe(i) for i in pending)
                raise WorkerError(f"no {kind} from {who} within {self.timeout:g} s (--worker-timeout)")
            for i in [i for i, c in pending.items() if c in ready]:
                try:
                    msg = pending.pop(i).recv()
                except EOFError:
                    self.procs[i].join(1.0)
                    raise WorkerError(f"{self.describe(i)} exited (exit code {self.procs[i].exitcode}) "
                                      f"before sending its {kind}") from None
                if msg[0] == "error":
                    raise WorkerError(f"{self.describe(i)} failed:\n{msg[1]}")
                out[i] = msg[1]
        return out

    def sample(self, weights, stats):
        for i, c in enumerate(self.conns):
            try:
                c.send(("policy", weights, stats))
            except (BrokenPipeError, ConnectionResetError):
                self.procs[i].join(1.0)
                raise WorkerError(f"{self.describe(i)} exited (exit code {self.procs[i].exitcode}) "
                                  "before taking the policy") from None
        return self.gather("fragment")

    def stop(self):
        """Asks every worker to end, waits a bounded time, SIGKILLs any that remain."""
        for c in self.conns:
            try:
                c.send(("stop",))
            except (BrokenPipeError, OSError):
                pass
        deadline = time.monotonic() + self.timeout
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
        self.kill()

    def kill(self):
        for p in self.procs:
            if p.pid is not None and p.exitcode is None:
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.join(1.0)


class InProcess:
    """--workers 0: one Sampler of every copy in this process."""

    def __init__(self, a):
        self.sampler = Sampler(0, a.n_envs, a.seed, a.hidden)
        self.n_steps = a.n_steps

    def sample(self, weights, stats):
        self.sampler.set_policy(weights, stats)
        return [self.sampler.sample(self.n_steps)]

    def stop(self):
        pass

    def kill(self):
        pass


# ---- the learner ----


class Learner:
    """The policy, Adam and the observation statistics: GAE and the PPO epochs over each batch."""

    def __init__(self, a):
        self.a = a
        torch.manual_seed(a.seed)
        self.agent = Agent(a.hidden)
        self.opt = torch.optim.Adam(self.agent.parameters(), lr=a.lr, eps=a.adam_eps)
        self.shuffle = torch.Generator().manual_seed(a.seed)
        self.moments = Moments()

    def weights(self):
        return {k: v.detach().numpy().copy() for k, v in self.agent.state_dict().items()}

    def stats(self):
        if not self.a.norm_obs:
            return None
        return (self.moments.mean.copy(), self.moments.variance(), self.a.obs_clip, self.a.obs_eps)

    def merge(self, fragments):
        """Fragments of consecutive copies, in order -> one batch indexed [t][global copy]; the
        copies' observation moments merged in copy order."""
        batch = {k: np.concatenate([f[k] for f in fragments], axis=1)
                 for k in ("obs", "actions", "logp", "values", "rewards", "terminated", "truncated", "final_values")}
        batch["last_values"] = np.concatenate([f["last_values"] for f in fragments])
        for f in fragments:
            count, mean, m2 = f["moments"]
            for i in range(mean.shape[0]):
                self.moments.merge(count, mean[i], m2[i])
        return batch

    def gae(self, b):
        """Advantages and returns: GAE(lambda), a truncated episode bootstrapped by V(final obs)."""
        a = self.a
        values = b["values"].astype(np.float64)
        rewards = b["rewards"] + a.gamma * b["final_values"] * (b["truncated"] & ~b["terminated"])
        nonterminal = 1.0 - (b["terminated"] | b["truncated"])
        adv = np.zeros_like(values)
        last = np.zeros(values.shape[1])
        for t in reversed(range(values.shape[0])):
            next_values = b["last_values"] if t == values.shape[0] - 1 else values[t + 1]
            delta = rewards[t] + a.gamma * next_values * nonterminal[t] - values[t]
            last = delta + a.gamma * a.gae_lambda * nonterminal[t] * last
            adv[t] = last
        return adv, adv + values

    def update(self, b, frac):
        """The PPO epochs over batch `b`, with learning rate and clip range scaled by `frac`."""
        a = self.a
        adv, ret = self.gae(b)
        lr = a.lr * frac if a.lr_schedule == "linear" else a.lr
        clip = a.clip_range * frac if a.clip_schedule == "linear" else a.clip_range
        for g in self.opt.param_groups:
            g["lr"] = lr
        obs = torch.from_numpy(b["obs"].reshape(-1, OBS))
        actions = torch.from_numpy(b["actions"].reshape(-1))
        old_logp = torch.from_numpy(b["logp"].reshape(-1))
        old_values = torch.from_numpy(b["values"].reshape(-1))
        adv = torch.from_numpy(adv.reshape(-1).astype(np.float32))
        ret = torch.from_numpy(ret.reshape(-1).astype(np.float32))
        params = list(self.agent.parameters())
        size = obs.shape[0]
        for _ in range(a.n_epochs):
            perm = torch.randperm(size, generator=self.shuffle)
            for start in range(0, size, a.batch_size):
                i = perm[start:start + a.batch_size]
                logp_all = torch.log_softmax(self.agent.actor(obs[i]), dim=-1)
                logp = logp_all.gather(1, actions[i].unsqueeze(1)).squeeze(1)
                entropy = -(logp_all.exp() * logp_all).sum(dim=1).mean()
                ratio = (logp - old_logp[i]).exp()
                mb_adv = adv[i]
                if a.norm_adv and len(i) > 1:
                    mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                pg_loss = torch.max(-mb_adv * ratio, -mb_adv * ratio.clamp(1 - clip, 1 + clip)).mean()
                v = self.agent.critic(obs[i]).squeeze(1)
                if a.clip_vloss:
                    v_clipped = old_values[i] + (v - old_values[i]).clamp(-clip, clip)
                    v_loss = torch.max((v - ret[i]) ** 2, (v_clipped - ret[i]) ** 2).mean()
                else:
                    v_loss = ((v - ret[i]) ** 2).mean()
                loss = pg_loss - a.ent_coef * entropy + a.vf_coef * v_loss
                self.opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(params, a.max_grad_norm)
                self.opt.step()


def evaluate(agent, stats, a):
    """Greedy (argmax, the first of equal logits) returns of a.eval_episodes episodes, all stepped
    together; episode k starts from the k-th output of splitmix64(mix(seed, 0xE7A1))."""
    r = Random(mix(a.seed, 0xE7A1))
    state = np.array([cartpole_start(r.next()) for _ in range(a.eval_episodes)])
    returns = np.zeros(a.eval_episodes)
    alive = np.ones(a.eval_episodes, bool)
    with torch.inference_mode():
        for _ in range(MAX_STEPS):
            idx = np.flatnonzero(alive)
            if idx.size == 0:
                break
            actions = agent.actor(torch.from_numpy(normalise(state[idx], stats))).argmax(dim=1).numpy()
            state[idx], terminated = cartpole_step(state[idx], actions)
            returns[idx] += 1.0
            alive[idx] = ~terminated
    return returns.mean(), returns.std()


# ---- the run ----


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--workers", type=int, default=4, help="rollout processes; 0: sample in this process")
    p.add_argument("--n-envs", type=int, default=8, help="environment copies, split over the workers")
    p.add_argument("--n-steps", type=int, default=32, help="steps per copy per iteration (a fragment)")
    p.add_argument("--batch-size", type=int, default=256, help="minibatch size (SB3's batch_size)")
    p.add_argument("--n-epochs", type=int, default=20)
    p.add_argument("--gamma", type=float, default=0.98)
    p.add_argument("--gae-lambda", type=float, default=0.8)
    p.add_argument("--lr", type=float, default=0.001, help="the learning rate at the start")
    p.add_argument("--lr-schedule", choices=("linear", "constant"), default="linear")
    p.add_argument("--clip-range", type=float, default=0.2, help="the clip range at the start")
    p.add_argument("--clip-schedule", choices=("linear", "constant"), default="linear")
    p.add_argument("--anneal-steps", type=int, default=None,
                   help="steps over which linear schedules reach 0 (default: --total-steps)")
    p.add_argument("--clip-vloss", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--ent-coef", type=float, default=0.0)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--adam-eps", type=float, default=1e-5)
    p.add_argument("--norm-adv", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--norm-obs", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--obs-clip", type=float, default=10.0)
    p.add_argument("--obs-eps", type=float, default=1e-8)
    p.add_argument("--hidden", type=int, nargs="+", default=[64, 64], help="hidden sizes of actor and critic")
    p.add_argument("--total-steps", type=int, default=200_000, help="give up after this many environment steps")
    p.add_argument("--target", type=float, default=SOLVED)
    p.add_argument("--window", type=int, default=20, help="training episodes whose mean must reach --target")
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--worker-timeout", type=float, default=60.0, help="seconds any wait for a worker may take")
    p.add_argument("--csv", metavar="PATH", help="iteration,env_steps,wall_s,mean_return per iteration")
    a = p.parse_args()
    if a.n_envs < 1 or a.n_steps < 1 or a.batch_size < 1 or a.n_epochs < 1 or a.window < 1 or a.eval_episodes < 1:
        p.error("--n-envs, --n-steps, --batch-size, --n-epochs, --window and --eval-episodes must be at least 1")
    if not 0 <= a.workers <= a.n_envs:
        p.error(f"--workers {a.workers}: give 0 (no worker processes) to --n-envs ({a.n_envs})")
    if min(a.hidden) < 1 or a.total_steps < 1 or a.worker_timeout <= 0:
        p.error("--hidden sizes and --total-steps must be at least 1, --worker-timeout above 0")
    if a.anneal_steps is None:
        a.anneal_steps = a.total_steps
    return a


def shares(n_envs, workers):
    """(first copy, copies) of each worker: as even as can be, the first ones one more."""
    out, first = [], 0
    for w in range(workers):
        n = n_envs // workers + (1 if w < n_envs % workers else 0)
        out.append((first, n))
        first += n
    return out


CHILDREN = []  # every worker process started, for the signal handler
MAIN_PID = os.getpid()


def on_signal(signum, _frame):
    if os.getpid() != MAIN_PID:  # a worker (fork copies the handler): just end
        os._exit(128 + signum)
    for p in CHILDREN:
        try:
            os.kill(p.pid, signal.SIGKILL)
        except (ProcessLookupError, TypeError):
            pass
    os._exit(128 + signum)


def header(a):
    cpus = len(os.sched_getaffinity(0))
    if a.workers:
        split = "/".join(str(n) for _, n in shares(a.n_envs, a.workers))
        load = f", oversubscribed: {a.workers} workers on {cpus} CPUs" if a.workers > cpus else f" on {cpus} CPUs"
        where = f"{a.workers} rollout workers (multiprocessing, fork; copies {split}){load}"
    else:
        where = f"no workers (sampling and learning in one process, {cpus} CPUs)"
    sched = lambda s: f"linear to 0 over {a.anneal_steps} steps" if s == "linear" else "constant"  # noqa: E731
    return (f"ppo_peer: CartPole-v1, CleanRL's PPO with rl-zoo's hyper-parameters, {where}, torch {torch.__version__} "
            f"and NumPy {np.__version__}, 1 thread per process; n_envs {a.n_envs}, n_steps {a.n_steps}, "
            f"batch_size {a.batch_size}, n_epochs {a.n_epochs}, gamma {a.gamma:g}, gae_lambda {a.gae_lambda:g}, "
            f"lr {a.lr:g} ({sched(a.lr_schedule)}), clip_range {a.clip_range:g} ({sched(a.clip_schedule)}), "
            f"clip_vloss {'on' if a.clip_vloss else 'off'}, ent_coef {a.ent_coef:g}, vf_coef {a.vf_coef:g}, "
            f"max_grad_norm {a.max_grad_norm:g}, adam_eps {a.adam_eps:g}, norm_adv {'on' if a.norm_adv else 'off'}, "
            f"norm_obs {'on' if a.norm_obs else 'off'} (clip {a.obs_clip:g}, eps {a.obs_eps:g}), hidden "
            f"{'x'.join(map(str, a.hidden))} tanh, seed {a.seed}, target {a.target:g} (last {a.window} training "
            f"episodes, then {a.eval_episodes} greedy), total_steps {a.total_steps}, worker_timeout "
            f"{a.worker_timeout:g} s; wall time from the start of training, process start-up excluded")


def train(a, samplers, learner, csv):
    """Iterations until solved or out of steps; (solved, steps, wall seconds, last evaluation)."""
    window = collections.deque(maxlen=a.window)
    steps, iteration, last_eval = 0, 0, None
    start = time.perf_counter()
    while steps < a.total_steps:
        iteration += 1
        t0 = time.perf_counter()
        fragments = samplers.sample(learner.weights(), learner.stats())
        t1 = time.perf_counter()
        batch = learner.merge(fragments)
        frac = max(0.0, 1.0 - steps / a.anneal_steps)
        steps += a.n_envs * a.n_steps
        learner.update(batch, frac)
        t2 = time.perf_counter()
        for _, _, ret, _ in sorted(e for f in fragments for e in f["finished"]):  # by step, then copy
            window.append(ret)
        mean = float(np.mean(window)) if window else float("nan")
        print(f"iteration {iteration}: steps {steps}, mean return {mean:.2f} over {len(window)} episodes, "
              f"{a.n_envs * a.n_steps / (t2 - t0):.0f} steps/s, sample {t1 - t0:.3f} s, learn {t2 - t1:.3f} s",
              flush=True)
        if csv:
            csv.write(f"{iteration},{steps},{time.perf_counter() - start:.4f},{'' if not window else f'{mean:.4f}'}\n")
        if len(window) == a.window and mean >= a.target:
            t3 = time.perf_counter()
            last_eval = evaluate(learner.agent, learner.stats(), a)
            solved = last_eval[0] >= a.target
            print(f"  greedy evaluation: {last_eval[0]:.2f} +- {last_eval[1]:.2f} ({a.eval_episodes} episodes, "
                  f"{time.perf_counter() - t3:.3f} s){': solved' if solved else ', training goes on'}", flush=True)
            if solved:
                return True, steps, time.perf_counter() - start, last_eval
    return False, steps, time.perf_counter() - start, last_eval


def main():
    a = parse_args()
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    print(header(a), flush=True)
    t0 = time.perf_counter()
    samplers = None
    try:
        samplers = Workers(a, shares(a.n_envs, a.workers)) if a.workers else InProcess(a)
        learner = Learner(a)
        print(f"start-up (excluded): importing NumPy and torch {IMPORT_S:.2f} s, "
              + (f"{a.workers} workers forked and ready, learner built {time.perf_counter() - t0:.2f} s" if a.workers
                 else f"sampler and learner built {time.perf_counter() - t0:.2f} s"), flush=True)
        csv = open(a.csv, "w") if a.csv else None
        try:
            if csv:
                csv.write("iteration,env_steps,wall_s,mean_return\n")
            solved, steps, wall, last_eval = train(a, samplers, learner, csv)
        finally:
            if csv:
                csv.close()
        if last_eval is None or not solved:  # the final policy's score (not timed)
            last_eval = evaluate(learner.agent, learner.stats(), a)
        samplers.stop()
    except WorkerError as e:
        if samplers is not None:
            samplers.kill()
        print(f"ppo_peer: {e}", file=sys.stderr, flush=True)
        return 2
    except BaseException:
        if samplers is not None:
            samplers.kill()
        raise
    print(f"mean return {last_eval[0]:.2f} +- {last_eval[1]:.2f} over {a.eval_episodes} episodes")
    print(f"solved in {steps} environment steps, {wall:.2f} s" if solved else f"not solved within {steps} steps",
          flush=True)
    return 0 if solved else 1


if __name__ == "__main__":
    sys.exit(main())
