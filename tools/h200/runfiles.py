"""Reading a run directory made by tools/h200/rl_run.sh (shared by rl_summary.py and preset.py)."""
import json
import os
import sys


def read_jsonl(rundir, name, who):
    """The JSON lines of RUNDIR/NAME; exits naming the file (and WHO reads it) when it cannot."""
    path = os.path.join(rundir, name)
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        sys.exit("%s: cannot read %s: %s" % (who, path, e))


def load_run(rundir, who):
    """(run line, {update: trace update line}, {update: grpo_tiny log record}) of a run."""
    trace = read_jsonl(rundir, "trace.jsonl", who)
    log = read_jsonl(rundir, "log.jsonl", who)
    run = next((t for t in trace if t.get("type") == "run"), {})
    ups = {t["update"]: t for t in trace if t.get("type") == "update"}
    return run, ups, {r["update"]: r for r in log}
