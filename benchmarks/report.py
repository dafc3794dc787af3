"""The suite's report: PNG plots and the Markdown results table from the summarized samples.

summary: {(bench, system, metric): dict(median, min, max, n, unit)}, as benchmarks/suite.py makes it.
Every figure in the table is a median over the suite's repetitions; the CSVs keep every sample.
"""
import math
import os
import re
import shutil

SYSTEMS = ["fibra", "raw_mpi", "multiprocessing", "mpi4py_futures", "dask", "ipyparallel", "optuna"]
PEERS = ["multiprocessing", "mpi4py_futures", "dask", "ipyparallel", "optuna"]
LABEL = {"fibra": "fibra", "raw_mpi": "raw MPI", "multiprocessing": "multiprocessing",
         "mpi4py_futures": "mpi4py.futures", "dask": "Dask", "ipyparallel": "IPyParallel",
         "optuna": "Optuna"}
COLOR = {"fibra": "#d62728", "raw_mpi": "#7f7f7f", "multiprocessing": "#1f77b4", "mpi4py_futures": "#2ca02c",
         "dask": "#ff7f0e", "ipyparallel": "#9467bd", "optuna": "#8c564b"}
TITLES = {"b1": "B1 framework overhead (Fiber's test)", "b2": "B2 throughput of tiny tasks",
          "b3": "B3 recovery from failures", "b5": "B5 start-up and idle CPU", "b6": "B6 large payloads",
          "b8": "B8 queues, pipes and processes",
          "b9": "B5 with one agent per worker (a pool over many nodes)",
          "sim": "The driver against simulated agents (10 to 10,000; 2 processes speak for them)",
          "tune": "B9 hyper-parameter search overhead (10,000 trials, ASHA)",
          "es": "ES scaling (CartPole-v1)",
          "b11": "B11 PPO: time to solve CartPole-v1 (5 seeds)",
          "b12": "B12 rollout sampling: environment steps/s with inference",
          "b12es": "B12 for ES: a generation's pairs on the hopper, environment steps/s",
          "esdriver": "The ES driver per generation against simulated agents (9,555 parameters)"}
FAULTS = ["none", "executor_kill", "segfault_once", "agent_kill"]
# B8's figures: (metric, table label, better, plot title)
B8_FIGURES = [("queue_single_items_per_s", "`Queue`, writer to reader Process, one item at a time: items/s", "higher",
               "Queue, single items (items/s)"),
              ("queue_batch_items_per_s", "`Queue`, writer to reader Process, in batches: items/s", "higher",
               "Queue, batches (items/s)"),
              ("queue_list_items_per_s", "`Queue` of lists (vectors) of 1,000, one queue item each: items/s", "higher",
               "Queue of lists (items/s)"),
              ("queue_batch_stream_items_per_s", "the batches as the reader saw them come (first get to last): items/s",
               "higher", "Queue, batches, reader's stream (items/s)"),
              ("queue_list_stream_items_per_s", "the lists as the reader saw them come (first get to last): items/s",
               "higher", "Queue of lists, reader's stream (items/s)"),
              ("pipe_roundtrip_us", "`Pipe` round trip, driver to a Process and back: us", "lower",
               "Pipe round trip (us)"),
              ("process_start_join_ms", "a no-op `Process` started and joined: ms", "lower",
               "Process start + join (ms)"),
              ("apply_async_roundtrip_us", "`apply_async` round trip, same run: us", "lower",
               "apply_async round trip (us)")]
# fibra::tune's figures beside Optuna's: (metric, table label, better, plot title)
TUNE_FIGURES = [("wall_s", "10,000 trials of 20 x 1 ms steps, ASHA (rf 4), 2 workers: wall s", "lower", "wall (s)"),
                ("overhead_pct", "overhead over the sleeping time per worker: %", "lower", "overhead (%)"),
                ("results_per_s", "results handled per second, end to end", "higher", "results/s")]
FAULT_LABEL = {"none": "no fault", "executor_kill": "executor SIGKILL at 30%",
               "segfault_once": "a task segfaults once", "agent_kill": "supervisor SIGKILL at 60%"}


def machine_line(m):
    """The machine and versions in one line (the CSVs' first line, the table's first sentence)."""
    v = m["versions"]
    return (f"{m['cores']} cores, {m['memory_gib']:.0f} GiB, Debian {m['debian']}, Linux {m['kernel']}, "
            f"{m['open_mpi']}, Python {m['python']}, mpi4py {v['mpi4py']}, Dask {v['distributed']}, "
            f"IPyParallel {v['ipyparallel']}; fibra {m['fibra_commit']}; {m['date_utc']}; load average "
            f"{m['load_before'][0]:.2f} before, {m.get('load_after', ['?'])[0]} after")


def _get(summary, b, s, metric):
    v = summary.get((b, s, metric))
    return v["median"] if v and v["n"] else math.nan


def _metrics(summary, b, pattern):
    """The metrics of benchmark `b` matching `pattern`, with its groups, sorted by number."""
    found = {}
    for (bench, _s, metric) in summary:
        m = re.fullmatch(pattern, metric)
        if bench == b and m:
            found[metric] = m.groups()
    return sorted(found.items(), key=lambda kv: [float(g) if re.fullmatch(r"[\d.]+", g) else g for g in kv[1]])


def _num(x, unit=""):
    if x is None or not math.isfinite(x):
        return "-"
    if abs(x) >= 1e6:
        return f"{x / 1e6:.3g} M"
    if abs(x) >= 1e4:
        return f"{x / 1e3:.3g} k"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}"


# ---- the figures of the table: (metric, label, better) per benchmark ----

def figures(summary, b):
    out = []
    if b == "b1":
        for mode in ("map", "seq"):
            for metric, (d,) in _metrics(summary, b, mode + r"_([\d.]+)ms_ratio"):
                out.append((metric, f"`{mode}`, {d} ms tasks: wall time / ideal", "lower"))
    elif b == "b2":
        out += [("map_noop_tasks_per_s", "`map` of no-ops, default chunk size: tasks/s", "higher"),
                ("map_noop_best_tasks_per_s", "`map` of no-ops, best chunk size tried: tasks/s", "higher"),
                ("apply_async_noop_tasks_per_s", "`apply_async` of no-ops, all submitted first: tasks/s", "higher"),
                ("roundtrip_us", "one call's round trip: us", "lower")]
    elif b == "b3":
        for f in FAULTS:
            if any(k[0] == b and k[2] == f + "_recovered" for k in summary):
                out.append((f + "_wall_s", f"{FAULT_LABEL[f]}: wall s", "lower"))
                if f != "none":
                    out.append((f + "_excess_s", f"{FAULT_LABEL[f]}: excess over no fault, s", "lower"))
                out.append((f + "_lost", f"{FAULT_LABEL[f]}: results lost / duplicated", "lower"))
    elif b == "b5":
        for metric, (n,) in _metrics(summary, b, r"startup_(\d+)_workers_s"):
            out.append((metric, f"start-up of {n} worker{'s' if n != '1' else ''}: s", "lower"))
        for metric, (n,) in _metrics(summary, b, r"idle_(\d+)_workers_cpu_percent"):
            out.append((metric, f"idle CPU of {n} worker{'s' if n != '1' else ''}: % of one core", "lower"))
    elif b == "b9":
        for metric, (n,) in _metrics(summary, b, r"agents_(\d+)_ready_s"):
            out += [(metric, f"{n} one-worker agents: ready, s (raw MPI: one spawn of {n}, all answered)", "lower"),
                    (f"agents_{n}_roundtrip_us", f"{n} agents: `apply_async` round trip, us", "lower"),
                    (f"agents_{n}_map_items_per_s", f"{n} agents: `map` of no-ops, items/s", "higher"),
                    (f"agents_{n}_idle_driver_cpu_pct", f"{n} agents idle: the driver's CPU, % of a core", "lower"),
                    (f"agents_{n}_idle_all_cpu_pct", f"{n} agents idle: every process's CPU, % of a core", "lower")]
    elif b == "sim":
        for metric, (n,) in _metrics(summary, b, r"agents_(\d+)_tasks_per_s"):
            out += [(metric, f"{n} simulated agents: `apply_async` tasks dispatched and answered, tasks/s", "higher"),
                    (f"agents_{n}_batches_per_s", f"{n} simulated agents: batches (dispatch decisions)/s", "higher"),
                    (f"agents_{n}_roundtrip_us", f"{n} simulated agents: `apply_async` round trip, us", "lower"),
                    (f"agents_{n}_idle_driver_cpu_pct", f"{n} simulated agents idle: the driver's CPU, % of a core",
                     "lower"),
                    (f"agents_{n}_ready_s", f"{n} simulated agents: ready, s", "lower")]
        for metric, (k, n) in _metrics(summary, b, r"silent_(\d+)_agents_(\d+)_tasks_per_s"):
            out += [(metric, f"{n} simulated agents, every {k}th falling silent: tasks/s (their loss and retries "
                             "included)", "higher"),
                    (f"silent_{k}_agents_{n}_workers_lost", f"{n} simulated agents, every {k}th falling silent: "
                                                            "agents declared lost", None)]
    elif b == "b8":
        out += [(m, label, better) for m, label, better, _title in B8_FIGURES]
        # multiprocessing's alone (fibra has no SimpleQueue row, no other start method): no ratio
        out += [("simplequeue_single_items_per_s", "multiprocessing.SimpleQueue, one item at a time: items/s", None),
                ("process_start_join_spawn_ms", "a no-op Process started and joined, 'spawn': ms", None)]
    elif b == "tune":
        out += [(m, label, better) for m, label, better, _title in TUNE_FIGURES]
        out += [("steps", "steps run (ASHA stops most trials early)", None),
                ("ingest_per_s", "the driver's ingestion alone (rows, stop rules, ASHA): results/s", None),
                ("sleep_overshoot_pct", "the floor: a 1 ms sleep's own overshoot here, %", None)]
    elif b == "b6":
        for metric, (size,) in _metrics(summary, b, r"payload_(\w+?)_bandwidth"):
            out.append((metric, f"{size.replace('mib', ' MiB')} round trip: MiB/s", "higher"))
            out.append((f"payload_{size}_roundtrip_s", f"{size.replace('mib', ' MiB')} round trip: s", "lower"))
    elif b == "b11":
        out += [("seconds_to_solve", "training until solved (median of the solved seeds): s", "lower"),
                ("steps_to_solve", "environment steps until solved", "lower"),
                ("command_seconds", "the whole command, start-up included: s", "lower"),
                ("solved_runs", "seeds solved", "higher")]
    elif b == "b12":
        out.append(("floor_steps_per_s", "the floor: one process, a plain loop: steps/s", None))
        out.append(("engine_steps_per_s", "the engine alone: one environment, zero actions: steps/s", None))
        for metric, (n,) in _metrics(summary, b, r"workers_(\d+)_steps_per_s"):
            out.append((metric, f"{n} rollout actor{'s' if n != '1' else ''}: steps/s", "higher"))
            out.append((f"workers_{n}_over_floor", f"{n} rollout actor{'s' if n != '1' else ''} over the floor", "higher"))
    elif b == "b12es":
        out.append(("floor_steps_per_s", "the floor: the same pairs in a plain loop: steps/s", None))
        for metric, (n,) in _metrics(summary, b, r"workers_(\d+)_steps_per_s"):
            out.append((metric, f"{n} worker{'s' if n != '1' else ''}: steps/s", "higher"))
            out.append((f"workers_{n}_over_floor", f"{n} worker{'s' if n != '1' else ''} over the floor", "higher"))
    elif b == "esdriver":
        for metric, (a, p) in _metrics(summary, b, r"agents_(\d+)_population_(\d+)_generation_s"):
            out.append((metric, f"{a} agents, population {p}: driver s per generation", "lower"))
            out.append((f"agents_{a}_population_{p}_update_s", f"{a} agents, population {p}: the update alone, s", "lower"))
            out.append((f"agents_{a}_population_{p}_saturates_at_workers",
                        f"{a} agents, population {p}: workers a driver keeps busy (pairs of 0.2 s)", "higher"))
    elif b == "es":
        for metric, (n,) in _metrics(summary, b, r"generation_(\d+)_workers_s"):
            w = f"{n} worker{'s' if n != '1' else ''}"
            out.append((metric, f"{w}: s per generation", "lower"))
            out.append((f"episodes_{n}_workers_per_s", f"{w}: episodes/s", "higher"))
            # the same seeds learn the same curve: a check that both ran the same task, not a contest
            out.append((f"final_return_{n}_workers", f"{w}: final mean return", None))
    return out


def _cell(summary, b, s, metric, ran):
    if b == "b3" and metric.endswith(("_wall_s", "_excess_s", "_lost")):
        fault = re.sub(r"_(wall_s|excess_s|lost)$", "", metric)
        rec = summary.get((b, s, fault + "_recovered"))
        if rec is None:
            return "-" if ran else "failed"
        if rec["zeros"]:
            times = "every time" if rec["zeros"] == rec["n"] else f"{rec['zeros']} of {rec['n']} times"
            return f"did not recover ({times})" if not metric.endswith("_lost") else "-"
        if metric.endswith("_lost"):  # the most in any one repetition
            lost = summary.get((b, s, fault + "_lost"))
            dup = summary.get((b, s, fault + "_duplicated"))
            return f"{_num(lost['max'] if lost else math.nan)} / {_num(dup['max'] if dup else math.nan)}"
    v = _get(summary, b, s, metric)
    if not math.isfinite(v):
        return "failed" if not ran else "-"
    text = _num(v)
    if metric == "map_noop_best_tasks_per_s":
        chunk = _get(summary, b, s, "map_noop_best_chunksize")
        default = "automatic" if s == "fibra" else "default"
        text += f" ({default})" if chunk == 0 else f" (chunk {chunk:.0f})" if math.isfinite(chunk) else ""
    return text


def _ratio(fibra, other, better):
    """How many times better fibra is than `other` (above 1: fibra is better)."""
    if not (math.isfinite(fibra) and math.isfinite(other)) or fibra <= 0 or other <= 0:
        return math.nan
    return other / fibra if better == "lower" else fibra / other


def table(summary, machine, comments, failures, a, images="plots"):
    """The Markdown results table, one section per benchmark; `images` is the folder of the plots,
    relative to where the table is read."""
    lines = [f"Machine: {machine_line(machine)}. {machine['repeats']} repetition(s) ({machine['mode']} sizes), "
             "systems alternating; each figure is the median over the repetitions (every sample is in "
             "`benchmarks/results/*.csv`). Ratios: how many times better fibra is (above 1: fibra is "
             "better; below 1: worse), against the best peer in that row and against the raw-MPI floor. "
             "B3's lost / duplicated: the most in any one repetition.", ""]
    failed_pairs = {(b, s) for b, s, _r, _e in failures}
    for b in a.benches:
        systems = [s for s in a.systems if any(k[0] == b and k[1] == s for k in summary) or (b, s) in failed_pairs]
        if not systems:
            continue
        lines += [f"### {TITLES[b]}", "", f"![{TITLES[b]}]({images}/{b}.png)", ""]
        head = ["figure"] + [LABEL[s] for s in systems] + ["fibra vs best peer", "fibra vs raw MPI"]
        lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        for metric, label, better in figures(summary, b):
            cells = [_cell(summary, b, s, metric, (b, s) not in failed_pairs or any(
                k[0] == b and k[1] == s for k in summary)) for s in systems]
            vs_peer = vs_raw = "-"
            f = _get(summary, b, "fibra", metric)
            if better and (b != "b3" or metric.endswith(("_wall_s", "_excess_s"))):
                peers = [(p, _get(summary, b, p, metric)) for p in PEERS if p in systems]
                if b == "b3":  # a system that did not recover every time has no figure to compare
                    def recovered(system):
                        rec = summary.get((b, system, re.sub(r"_(wall_s|excess_s)$", "_recovered", metric)))
                        return rec is not None and rec["n"] > 0 and rec["zeros"] == 0
                    peers = [(p, v) for p, v in peers if recovered(p)]
                    f = f if recovered("fibra") else math.nan
                peers = [(p, v) for p, v in peers if math.isfinite(v)]
                if peers:
                    best = min(peers, key=lambda pv: pv[1]) if better == "lower" else max(peers, key=lambda pv: pv[1])
                    r = _ratio(f, best[1], better)
                    vs_peer = (f"{r:.2f}x ({LABEL[best[0]]})" if math.isfinite(r) else
                               f"- ({LABEL[best[0]]}: {_num(best[1])})")
                r = _ratio(f, _get(summary, b, "raw_mpi", metric), better)
                vs_raw = f"{r:.2f}x" if math.isfinite(r) else "-"
            lines.append("| " + " | ".join([label] + cells + [vs_peer, vs_raw]) + " |")
        notes = [(s, n) for (bench, s), ns in sorted(comments.items()) if bench == b for n in ns[1:]]
        if notes:
            lines += ["", "<details><summary>What the programs said they ran (notes)</summary>", ""]
            lines += [f"- {LABEL[s]}: {n}" for s, n in notes] + ["", "</details>"]
        lines.append("")
    if failures:
        lines += ["Runs that failed:", ""] + [f"- {b} {LABEL[s]}, repetition {r}: {e}" for b, s, r, e in failures]
        lines.append("")
    return "\n".join(lines)


# ---- plots ----

def _median_lines(axes, panels, summary, b, systems, xlabel, style="-", label=""):
    """One panel per (metric pattern with the count as its group, y label): each system's medians
    against that count, on a log2 x axis (a y label of None leaves the panel's as it is)."""
    for ax, (pattern, ylabel) in zip(axes, panels):
        for s in systems:
            pts = [(int(n), summary[(b, s, m)]["median"]) for m, (n,) in _metrics(summary, b, pattern)
                   if (b, s, m) in summary and summary[(b, s, m)]["n"]]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", linestyle=style, label=LABEL[s] + label,
                        color=COLOR[s])
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        if ylabel:
            ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)


def plots(summary, samples, out_dir):
    """Draws one PNG per benchmark present; returns their paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(out_dir, exist_ok=True)
    benches = sorted({k[0] for k in summary})
    made = []
    for b in benches:
        systems = [s for s in SYSTEMS if any(k[0] == b and k[1] == s for k in summary)]
        fig = None
        if b == "b1":
            fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
            for ax, mode in zip(axes, ("map", "seq")):
                ideal = {}
                for s in systems:
                    pts = [(float(d), summary[(b, s, m)]) for m, (d,) in _metrics(summary, b, mode + r"_([\d.]+)ms_wall")
                           if (b, s, m) in summary and summary[(b, s, m)]["n"]]
                    if not pts:
                        continue
                    for d, v in pts:
                        r = _get(summary, b, s, f"{mode}_{d:g}ms_ratio")
                        if math.isfinite(r) and r > 0:
                            ideal[d] = v["median"] / r
                    xs = [d for d, _ in pts]
                    ys = [v["median"] for _, v in pts]
                    err = [[y - v["min"] for y, (_, v) in zip(ys, pts)], [v["max"] - y for y, (_, v) in zip(ys, pts)]]
                    ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=LABEL[s], color=COLOR[s])
                if ideal:
                    xs = sorted(ideal)
                    ax.plot(xs, [ideal[x] for x in xs], "k--", linewidth=1, label="ideal")
                ax.set_xscale("log")
                ax.set_yscale("log")
                ax.set_xlabel("task duration (ms)")
                ax.set_title(f"{mode}: sleeping tasks (dashed: ideal)")
                ax.grid(True, which="both", alpha=0.3)
            axes[0].set_ylabel("wall time (s)")
            axes[1].legend(fontsize=8)
        elif b in ("b2", "b6", "b3", "b8", "tune"):
            panels = {"b2": [("map_noop_tasks_per_s", "map, default chunk (tasks/s)"),
                             ("map_noop_best_tasks_per_s", "map, best chunk (tasks/s)"),
                             ("apply_async_noop_tasks_per_s", "apply_async (tasks/s)"),
                             ("roundtrip_us", "round trip (us)")],
                      "b6": [(m, m.replace("payload_", "").replace("_bandwidth", "").replace("mib", " MiB")
                              + " round trip (MiB/s)") for m, _ in _metrics(summary, b, r"payload_(\w+?)_bandwidth")],
                      "b3": [(f + "_wall_s", FAULT_LABEL[f] + " (wall s)") for f in FAULTS
                             if any(k[0] == b and k[2] == f + "_wall_s" for k in summary)],
                      "b8": [(m, title) for m, _label, _better, title in B8_FIGURES],
                      "tune": [(m, title) for m, _label, _better, title in TUNE_FIGURES]}[b]
            if not panels:
                continue
            fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.8), squeeze=False)
            for ax, (metric, title) in zip(axes[0], panels):
                xs, ys, lo, hi, colors, names = [], [], [], [], [], []
                for i, s in enumerate(systems):
                    v = summary.get((b, s, metric))
                    names.append(LABEL[s])
                    if not v or not v["n"]:
                        ax.text(i, 0, "none" if b != "b3" else "did not\nrecover", ha="center", va="bottom",
                                fontsize=7, rotation=90, transform=ax.get_xaxis_transform())
                        continue
                    xs.append(i)
                    ys.append(v["median"])
                    lo.append(v["median"] - v["min"])
                    hi.append(v["max"] - v["median"])
                    colors.append(COLOR[s])
                ax.bar(xs, ys, yerr=[lo, hi], color=colors, capsize=3)
                ax.set_xticks(range(len(names)))
                ax.set_xticklabels(names, rotation=40, ha="right", fontsize=8)
                if b in ("b2", "b8"):
                    ax.set_yscale("log")
                ax.set_title(title, fontsize=9)
                ax.grid(True, axis="y", alpha=0.3)
        elif b == "es":
            fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
            for ax, pattern, ylabel in ((axes[0], r"generation_(\d+)_workers_s", "time per generation (s)"),
                                        (axes[1], r"episodes_(\d+)_workers_per_s", "episodes/s")):
                for s in systems:
                    pts = [(int(n), summary[(b, s, m)]) for m, (n,) in _metrics(summary, b, pattern)
                           if (b, s, m) in summary and summary[(b, s, m)]["n"]]
                    if pts:
                        ys = [v["median"] for _, v in pts]
                        err = [[y - v["min"] for y, (_, v) in zip(ys, pts)], [v["max"] - y for y, (_, v) in zip(ys, pts)]]
                        ax.errorbar([p[0] for p in pts], ys, yerr=err, marker="o", capsize=3, label=LABEL[s],
                                    color=COLOR[s])
                ax.set_xscale("log", base=2)
                ax.set_yscale("log")
                ax.set_xlabel(f"workers (past {os.cpu_count()}: oversubscribed)")
                ax.set_ylabel(ylabel)
                ax.grid(True, which="both", alpha=0.3)
            axes[0].set_title("median time per generation (generations 2..G)")
            axes[1].set_title("episodes per second")
            axes[0].legend(fontsize=8)
        elif b == "b5":
            fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
            _median_lines(axes, ((r"startup_(\d+)_workers_s", "start-up (s)"),
                                 (r"idle_(\d+)_workers_cpu_percent", "idle CPU (% of one core)")),
                          summary, b, systems, "workers")
            axes[0].set_yscale("log")
            axes[0].set_title("time from creating the pool to all workers ready")
            axes[1].set_title("CPU of an idle pool, all its processes")
            axes[0].legend(fontsize=8)
        elif b == "b9":
            fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
            _median_lines(axes, ((r"agents_(\d+)_ready_s", "ready (s)"),
                                 (r"agents_(\d+)_roundtrip_us", "apply_async round trip (us)"),
                                 (r"agents_(\d+)_idle_driver_cpu_pct", "idle driver (% of a core)")),
                          summary, b, systems, "agents, one worker each")
            axes[0].set_title("Pool() until every agent is ready")
            axes[1].set_title("one call there and back")
            axes[2].set_title("the driver's CPU while idle")
            axes[0].legend(fontsize=8)
        elif b == "sim":
            fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
            _median_lines(axes, ((r"agents_(\d+)_tasks_per_s", "tasks/s"),
                                 (r"agents_(\d+)_roundtrip_us", "apply_async round trip (us)"),
                                 (r"agents_(\d+)_idle_driver_cpu_pct", "idle driver (% of a core)")),
                          summary, b, systems, "simulated agents, one worker each")
            _median_lines(axes, ((r"silent_\d+_agents_(\d+)_tasks_per_s", None),
                                 (r"silent_\d+_agents_(\d+)_roundtrip_us", None),
                                 (r"silent_\d+_agents_(\d+)_idle_driver_cpu_pct", None)),
                          summary, b, systems, "simulated agents, one worker each", style="--",
                          label=" (1% of agents silent)")
            axes[0].set_title("tasks dispatched and answered")
            axes[1].set_title("one call there and back")
            axes[2].set_title("the driver's CPU while idle")
            axes[0].legend(fontsize=8)
        if fig is None:
            continue
        fig.suptitle(TITLES[b], fontsize=11)
        fig.tight_layout()
        path = os.path.join(out_dir, f"{b}.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        made.append(path)
    return made


def update_docs(root, table_md, plot_paths):  # table_md made with images="benchmarks"
    """Copies the plots to docs/benchmarks/ and puts the table between the markers of
    docs/benchmarks.md (appending a section with the markers if they are missing)."""
    img_dir = os.path.join(root, "docs", "benchmarks")
    os.makedirs(img_dir, exist_ok=True)
    for p in plot_paths:
        shutil.copy(p, os.path.join(img_dir, os.path.basename(p)))
    doc = os.path.join(root, "docs", "benchmarks.md")
    text = open(doc).read()
    begin, end = "<!-- suite:begin -->", "<!-- suite:end -->"
    block = f"{begin}\n<!-- written by benchmarks/run.sh --docs; edits here are overwritten -->\n\n{table_md}\n{end}"
    if begin in text and end in text:
        text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n## Results of the suite\n\n" + block + "\n"
    with open(doc, "w") as f:
        f.write(text)
