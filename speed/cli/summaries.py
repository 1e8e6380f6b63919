"""Human-readable tables of what the commands return: a partition's manifest, a training
run's metrics, a parallel run's plan."""

from __future__ import annotations

import math
from pathlib import Path

from .._util import full_time


def format_summary(m: dict) -> str:
    """A human-readable table of a shards manifest."""
    inp = m.get("input", {})
    sp = m.get("split", {})
    secs = m.get("seconds", {})
    split = (f"train {m['num_train_events']:,}, val {sp.get('num_val_events', 0):,}, "
             f"test {sp.get('num_test_events', 0):,}")
    appended = sum(a["num_events"] for a in m.get("appends", []))
    events = (f"{m['num_events']:,} (the partitioned log {m['num_events'] - appended:,}: {split}; appended since "
              f"{appended:,})" if appended else f"{m['num_events']:,} ({split})")
    lines = [
        f"input        {inp.get('source')} ({inp.get('format')}{', bipartite' if inp.get('bipartite') else ''})"
        + (", partitioned; events appended since below" if appended else ""),
        f"events       {events}",
        f"nodes        {m['num_nodes']:,} ({m.get('num_train_nodes', 0):,} in training events)",
    ]
    for a in m.get("appends", []):
        lines.append(f"appended     {a.get('source') or 'events'}: {a['num_events']:,} events (version {a['version']}, "
                     f"{a.get('new_nodes', 0):,} new nodes, {100 * a.get('edge_cut', 0):.1f}% cut"
                     + (f", {a['already_stored']:,} already stored left out" if a.get("already_stored") else "")
                     + ")")
    if inp.get("columns"):
        lines.append("columns      " + ", ".join(f"{k} {v}" for k, v in inp["columns"].items()))
    if inp.get("t_min") is not None:
        lines.append(f"time         {full_time(inp['t_min'], inp.get('time_text'))} to "
                     f"{full_time(inp['t_max'], inp.get('time_text'))}")
    if inp.get("time_guess"):  # the default time column does not look like time: impossible to miss
        lines.append(f"CHECK        {inp['time_guess']}: training refuses these shards until the time column is "
                     "named (partition again with --time-col)")
    if not inp.get("sorted_input", True):
        moved = inp.get("out_of_order_rows")
        lines.append("note         input was not sorted by time; events were stable-sorted"
                     + (f" ({moved:,} rows earlier than the row before)" if moved else ""))
    if sp.get("num_new_nodes"):
        removed = m["num_train_events"] - sp.get("num_train_events_masked", m["num_train_events"])
        lines.append(f"hold-out     {sp['num_new_nodes']:,} nodes held out for the new-node metric "
                     f"(--new-node-fraction {sp.get('new_node_fraction')}): their {removed:,} training events are "
                     f"not trained on, so training sees {sp.get('num_train_events_masked', 0):,}"
                     + (f" of the partitioned log's {m['num_events'] - appended:,} (appended events are not in the "
                        "split: `speed update` takes them in, or partition the whole log again)" if appended else "")
                     + "; --new-node-fraction 0 keeps them")
    if inp.get("self_loops") or inp.get("duplicate_events"):
        lines.append(f"kept         {inp.get('self_loops', 0):,} self-loops, {inp.get('duplicate_events', 0):,} "
                     "duplicate events")
    params = ", ".join(f"{k}={v}" for k, v in m["params"].items())
    hubs = f", {m['num_hubs']:,} hubs" if m.get("num_hubs") is not None else ""
    if m.get("dynamic_hubs"):
        hubs += f" + {m['dynamic_hubs']:,} promoted for balance"
    lines += [
        f"method       {m['method']} P={m['num_parts']} ({params})",
        f"edge cut     {100 * m['edge_cut']:.2f}% ({m.get('cut_events', 0):,} training events)",
        f"replication  {m['replication_factor']:.4f} ({m['shared_nodes']:,} shared nodes{hubs})",
        f"node portion {100 * m.get('node_portion_mean', 0):.2f}% ± {100 * m.get('node_portion_std', 0):.2f}%",
    ]
    if "largest_part_ratio" in m:
        lines.append(f"balance      largest part {m['largest_part_ratio']:.3f} x the mean of assigned training events")
        bound, n, parts = m["params"].get("balance"), sum(m.get("assigned_events") or []), m["num_parts"]
        if bound is not None and n and m["largest_part_ratio"] > 1 + bound + 1e-9:
            best = math.ceil(n / parts) / (n / parts)  # whole events: a part holds at least ceil(n / P)
            why = (f"{n:,} training events over {parts} parts cannot be split finer (the best possible is "
                   f"{best:.3f} x)" if m["largest_part_ratio"] <= best + 1e-9 else
                   "shared-node events could not be spread further")
            lines.append(f"note         the balance bound (1 + {bound}) x the mean does not hold: {why}")
    if m.get("dynamic_hubs"):
        # measured: without in-epoch syncs such shards can train weights that fail on the full
        # graph (a run then warns); the default --sync-every prevented it on every seed measured
        lines.append("note         nodes were promoted for balance: train these shards with shared-node syncs "
                     "within the epoch (--sync-every, default on); docs/parallel.md")
    lines += ["", f"{'part':>4}  {'nodes':>10}  {'events':>12}  {'assigned':>12}  {'stream load':>12}"]
    loads = m.get("stream_loads") or [None] * m["num_parts"]
    assigned = m.get("assigned_events") or [None] * m["num_parts"]
    for p, (nn, ne, a, ld) in enumerate(zip(m["part_nodes"], m["part_events"], assigned, loads)):
        lines.append(f"{p:>4}  {nn:>10,}  {ne:>12,}  {'' if a is None else format(a, ','):>12}  "
                     f"{'' if ld is None else format(ld, ','):>12}")
    lines.append("")
    lines.append(("seconds      " if not m.get("appends") else "seconds      of the first partition: ")
                 + ", ".join(f"{k} {v:.3f}" for k, v in secs.items()))
    if m.get("appends"):
        lines += ["", format_appends(m)]
    return "\n".join(lines)


def format_appends(m: dict) -> str:
    """The appends of a shards manifest, the latest last, and the re-partition advice."""
    base = m["base_quality"]
    lines = [f"version {m['version']}: {len(m['appends'])} append(s) after a partition of "
             f"{base['num_partitioned_events']:,} events (edge cut {100 * base['edge_cut']:.2f}%, replication "
             f"{base['replication_factor']:.4f}); now {m['num_partitioned_events']:,} partitioned events",
             f"{'version':>7}  {'events':>10}  {'new nodes':>9}  {'new hubs':>8}  {'edge cut':>8}  {'seconds':>8}"]
    for a in m["appends"]:
        lines.append(f"{a['version']:>7}  {a['num_events']:>10,}  {a['new_nodes']:>9,}  {a['new_hubs']:>8,}  "
                     f"{100 * a['edge_cut']:>7.2f}%  {a['seconds']['total']:>8.3f}")
    last = m["appends"][-1].get("seconds", {})
    lines.append(f"seconds      of version {m['appends'][-1]['version']}: "
                 + ", ".join(f"{k} {v:.3f}" for k, v in last.items() if k != "total"))
    again = m["appends"][-1].get("already_stored", 0)
    if again:
        lines.append(f"already      {again:,} event(s) of this file were stored already (at the shards' last time, "
                     "sent again): not stored twice")
    lines.append(f"advice       {m['advice']}" if m.get("advice") else
                 "advice       none: the appended shards keep the quality of the first partition")
    return "\n".join(lines)


def _candidates_text(tt: dict, k: int) -> str:
    """"100 candidates per event", or, when some events had fewer left to rank against (as TGB
    gives them), "up to 100 ... (37.4 on average)"."""
    k = tt.get("candidates", k)
    mean = tt.get("candidates_mean")
    if mean is not None and mean < k - 1e-9:
        return f"up to {k} candidates per event ({mean:.1f} on average: fewer remained), none a true edge"
    return f"{k} candidates per event, none a true edge"


def _wrote(out: Path) -> str:
    """``wrote RUN/metrics.json, curves.png, ...``: the run's files as they are in its folder."""
    from ..train.run.folder import RunFolder

    files = RunFolder(out).files()
    return f"wrote {out}/{', '.join(files)}" if files else f"wrote nothing to {out}"


def format_train_summary(m: dict, out: Path) -> str:
    """A human-readable summary of a training run (or of a baseline's evaluation)."""
    lines = []
    if m.get("edgebank"):
        head = f"{m['model']} ({m['edgebank']['mode']} memory, not trained)"
    else:
        lines.append(f"{'epoch':>5}  {'loss':>7}  {'val AP':>7}  {'val AUC':>7}  {'events/s':>9}  {'seconds':>7}")
        for e in m["epochs"]:
            v = e["val"].get("selection", e["val"])["transductive"] if e.get("val") else None
            val = f"{v['ap']:>7.4f}  {v['auc']:>7.4f}" if v else f"{'-':>7}  {'-':>7}"
            lines.append(f"{e['epoch']:>5}  {e['loss']:>7.4f}  {val}  "
                         f"{e['train_events_per_s']:>9,.0f}  {e['train_seconds']:>7.1f}"
                         + (f"  cut after {e['train_events']:,} events (--max-steps)" if e.get("cut") else ""))
        lines.append("")
        head = f"best epoch {m['best_epoch']} ({m['model']})"
    d = m.get("data", {})
    if d.get("num_events"):
        cols = f" ({', '.join(f'{k} {v}' for k, v in d['columns'].items())})" if d.get("columns") else ""
        span = (f", time {full_time(d['t_min'], d.get('time_text'))} to {full_time(d['t_max'], d.get('time_text'))}"
                if d.get("t_min") is not None else "")
        lines.append(f"data: {d['num_events']:,} events{cols}{span}")
        moved = d.get("out_of_order_rows")
        if moved:
            n = max(d["num_events"] - 1, 1)
            lines.append(f"time: {moved:,} rows ({100 * moved / n:.1f}%) of the file were earlier than the row before "
                         "them; the events were stable-sorted by time")
        if d.get("appended_events_not_trained"):
            lines.append(f"appended: the shards hold {d['appended_events_not_trained']:,} more events appended since "
                         "the partition; a run trains on the partitioned log's split (take them in with `speed "
                         "update RUN SHARDS`, or partition the whole log again to train on them)")
        period, unmasked = d.get("num_train_period_events", 0), d.get("num_train_events", 0)
        held = period - unmasked
        why = [f"{held:,} touch nodes held out for the new-node metric (--new-node-fraction 0 keeps them)"] \
            if held > 0 else []
        # a parallel run trains what its ranks' sub-graphs hold: the events between parts that no
        # rank holds together in an epoch are left out of it
        trained = sorted({e["train_events"] for e in m.get("epochs", []) if e.get("ranks") and not e.get("cut")})
        if trained and (trained[0] != unmasked or len(trained) > 1):
            few, most = unmasked - trained[-1], unmasked - trained[0]
            span = f"{trained[0]:,}" if len(trained) == 1 else f"{trained[0]:,} to {trained[-1]:,}"
            gap = f"{few:,}" if few == most else f"{few:,} to {most:,}"
            why.append(f"{gap} join parts that no rank held together in an epoch (the partition's cut, per epoch's "
                       f"grouping; `speed plan` shows it as events trained per epoch)")
            lines.append(f"trained on {span} of the {period:,} training-period events per epoch: " + "; ".join(why))
        elif why:
            lines.append(f"trained on {unmasked:,} of the {period:,} training-period events: {why[0]}")
    th = m.get("threads")
    if th and th.get("per_process"):
        n = th.get("processes", 1)
        who = f"{n} rank{'s' if n != 1 else ''}" if m.get("nproc", 1) > 1 or n > 1 else "1 process"
        lines.append(f"ran on {who} x {th['per_process']} thread{'s' if th['per_process'] != 1 else ''}"
                     + (f" ({th['why']})" if th.get("why") else ""))
    paced = _pacing_line(m)
    if paced:
        lines.append(paced)
    cg = m.get("cuda_graph")
    if cg is not None:
        if cg.get("failed"):
            lines.append(f"--cuda-graph: the step could not be recorded ({cg['failed']}); the padded steps ran eagerly")
        elif cg.get("recorded"):
            lines.append(f"--cuda-graph: {cg['replays']:,} steps replayed from {cg['recorded']} recorded graph"
                         f"{'s' if cg['recorded'] != 1 else ''} (the first shape's first {cg.get('warmup')} steps, "
                         f"each later shape's first {cg.get('rewarm', cg.get('warmup'))}, and shapes seen too few "
                         "times ran eagerly)")
        shapes = (cg.get("bounds") or {}).get("shapes") or []
        if shapes:  # the largest batch shape's padding, fitted to its plans
            top = max(shapes, key=lambda b: b["events"])
            lines.append(f"--cuda-graph: plans padded to {top['of_worst_case']:.0%} of the worst case of a "
                         f"{top['events']:,}-event batch ({top['keys']:,} memory keys, {top['pending']:,} pending "
                         f"events; the sizes grew {cg['bounds'].get('grown', 0)} times)")
        if not cg.get("failed") and not cg.get("recorded"):
            lines.append("--cuda-graph: no step was recorded (no CUDA device, or too few steps of one shape): the "
                         "fixed-shape steps ran eagerly")
    ce = m.get("cuda_graph_evaluation")
    if ce is not None:
        if ce.get("failed"):
            lines.append(f"--cuda-graph: an evaluation step could not be recorded ({ce['failed']}); the padded "
                         "evaluation steps ran eagerly")
        elif ce.get("recorded"):
            lines.append(f"--cuda-graph: {ce['replays']:,} evaluation steps replayed from {ce['recorded']} recorded "
                         f"graph{'s' if ce['recorded'] != 1 else ''}")
        else:
            lines.append("--cuda-graph: no evaluation step was recorded (no CUDA device, or too few steps of one "
                         "shape): the padded evaluation steps ran eagerly")
    if "test" not in m:  # every epoch was cut: nothing validated, no best epoch, no test
        lines.append(f"every epoch was cut at {m['config'].get('max_steps')} steps (--max-steps): no epoch was "
                     "validated or tested, and no best.json was written")
        lines.append(_wrote(out))
        return "\n".join(lines)
    tt, ti = m["test"]["transductive"], m["test"].get("inductive")
    how = {"per_batch": "mean over batches", "pooled": "pooled"}.get(tt.get("aggregate"), "pooled")
    other = {"per_batch": "pooled", "pooled": "per batch"}.get(tt.get("aggregate"))
    also = f"; {other} {tt[other.replace(' ', '_')]['ap']:.4f}" if other and other.replace(' ', '_') in tt else ""
    lines.append(f"{head}: test AP {tt['ap']:.4f}, AUC {tt['auc']:.4f} ({how}{also}); "
                 f"{m.get('protocol', 'tgn')} protocol, {m['config']['eval_negatives']} negatives")
    bound = m["config"].get("eval_max_steps")
    if bound:
        counts = [f"{(m.get(p) or {}).get('transductive', {}).get('count', 0):,} {p}" for p in ("val", "test")]
        lines.append(f"evaluation bounded to {bound} batches a pass (--eval-max-steps): the figures cover the first "
                     f"{' and '.join(counts)} events, not the periods; a measuring run, not a result")
    chosen = (m.get("val") or {}).get("selection")
    if chosen:
        lines.append(f"best epoch chosen on validation AP with {chosen['negatives']} negatives (the epochs' val AP "
                     f"above), as {m.get('protocol')}'s training script does; the val and test figures use "
                     f"{m['config']['eval_negatives']} negatives")
    ref = tt.get("float32")
    if ref and abs(ref["ap"] - tt["ap"]) >= 5e-5:  # only when the reference code would print another figure
        lines.append(f"as the {m.get('protocol', 'tgn')} reference code computes it (float32 probabilities): "
                     f"test AP {ref['ap']:.4f}, AUC {ref['auc']:.4f}")
    if ti is not None:
        lines.append(f"new nodes: test AP {ti['ap']:.4f}, AUC {ti['auc']:.4f} over {ti['count']:,} events touching "
                     f"a node unseen in training" if ti.get("count") else "new nodes: no test event touches a node "
                     "unseen in training")
    if "mrr" in tt:
        against = "the log's stored negatives (TGB)" if m["data"].get("ranking_candidates") == "stored" else \
            _candidates_text(tt, m['config']['mrr_negatives'])
        lines.append(f"test MRR {tt['mrr']:.4f}, Hits@10 {tt['hits@10']:.4f} ({against})")
    if "node_classification" in m:
        lines.append(f"node classification AUROC {m['node_classification']['auroc']:.4f} (test)")
    for message in m.get("warnings", []):
        lines.append(f"warning: {message}")
    lines.append(_wrote(out))
    return "\n".join(lines)


def _pacing_line(m: dict) -> str:
    """How the evaluation chose to plan its steps on a CPU, where a pass measured it
    (speed.train.eval.pacing); empty otherwise."""
    work = (m.get("evaluation_work") or [[]])[0]
    measured = next((w for w in work if w.get("pacing")), None)
    if measured is None:
        return ""
    p = measured["pacing"]
    in_step, ahead = min(p["step_median_seconds"]) * 1e3, p["ahead_median_seconds"] * 1e3
    fewer = max(1, int(p["threads"]) - 1)
    way = "ahead, by a thread beside the steps" if p["ahead"] else "in the step"
    return (f"evaluation planned {way}: measured on the {measured['pass']} pass, a step took {ahead:.2f} ms with its "
            f"plan built ahead ({fewer} torch thread{'s' if fewer != 1 else ''} left to it) and {in_step:.2f} ms "
            f"planning its own ({p['threads']} threads); the figures are the same either way, and --pipeline or "
            "--no-pipeline fixes the choice")


def format_plan(p: dict) -> str:
    """A human-readable table of :func:`speed.train.pac.budget.plan`."""
    mib = 1 << 20
    lines = [f"{p['shards']}: {p['num_parts']} parts, {p['num_shared']:,} shared nodes, "
             f"{p['train_events']:,} training events",
             f"{p['nproc']} ranks, subgraph {p['subgraph']}, {p['model']} node state "
             f"{p['memory_bytes_per_node']} B/node ({p['memory_bytes_unpartitioned'] / mib:,.1f} MiB unpartitioned)"
             + (f", static memory ({p['static_memory']}) {p['static_memory_bytes'] / mib:,.1f} MiB on every rank"
                if p.get("static_memory_bytes") else ""),
             "", f"{'epoch':>5}  {'rank':>4}  {'parts':<12}  {'events':>12}  {'share':>6}  {'nodes':>10}  "
                 f"{'memory MiB':>10}  {'peak MiB':>9}"]
    for e in p["epochs"]:
        for r in e["ranks"]:
            peak = f"{r['peak_bytes'] / mib:>9,.0f}" if "peak_bytes" in r else f"{'-':>9}"
            lines.append(f"{e['epoch']:>5}  {r['rank']:>4}  {','.join(map(str, r['parts'])):<12}  {r['events']:>12,}  "
                         f"{100 * r['share']:>5.1f}%  {r['nodes']:>10,}  {r['memory_bytes'] / mib:>10.1f}  {peak}")
        wi = e["work_inflation"]
        why = ("the rest join parts that no rank holds together this epoch: the partition's cut" if wi < 1 - 1e-9 else
               "events between shared nodes are trained on every rank holding them" if wi > 1 + 1e-9 else "each once")
        lines.append(f"{'':>5}  events trained per epoch: {100 * wi:.1f}% of the training events ({why}); the largest "
                     f"rank trains {100 * e['largest_share']:.1f}% of them: an epoch ≈ {e['expected_epoch_time']:.2f}x "
                     f"one process's, if a rank trains as fast as one process")
    lines.append("the epoch estimate leaves out: a rank's share of the cores where ranks share a machine (measured "
                 "here: two ranks on 2 cores compute about 1.5x one process's rate, not 2x), the gradient all-reduce "
                 "and the shared-node syncs (a few % of a step over gloo), and the evaluation (divided among the ranks)")
    lines.append("peak MiB: a rank's expected peak resident memory (runtime, then the largest of its training "
                 "sub-graph and node state, and its share of the evaluation: the memories and neighbour rings of the "
                 "nodes it owns and every node's pending events, twice over with the back-up of a period's start; what a "
                 "pass holds per event of the period; the val and test events it streams from the mapped log)")
    if p.get("advice"):
        lines.append(f"advice: the shards (version {p['version']}, with appends) drifted: {p['advice']}")
    return "\n".join(lines)
