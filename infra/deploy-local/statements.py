"""Is every IAM statement the scenario's path needs really needed? For each statement of the
functions' roles, the operator policy and the invoke policy, deploys template.yaml with that one
statement granting nothing else (its Action replaced by sts:GetCallerIdentity) and runs the
scenario (infra/deploy-local/run.sh, CHARGE_ONCE_TEMPLATE); a statement the scenario needs must
make it fail. Prints a line per statement: which step failed, or that the scenario passed
without it (a statement off the scenario's path: a dead-letter copy, a failure destination).

    statements.py [--jobs N] [--only SID[,SID...]] OUT_DIR

Not part of CI (about 20 minutes with 3 jobs): run it when a role's statements change.
"""

import argparse
import concurrent.futures
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def statements(text):
    """(line index of its Sid, Sid, owner) for every statement with a Sid and a one-line Action,
    the owner being the resource (function or policy) it belongs to."""
    lines = text.split("\n")
    owner, out = None, []
    for i, line in enumerate(lines):
        m = re.match(r"^  ([A-Za-z0-9]+):\s*$", line)
        if m:
            owner = m.group(1)
        m = re.match(r"^\s*- Sid: (\w+)\s*$", line)
        if m and owner:
            out.append((i, m.group(1), owner))
    return out


def without(text, index):
    """The template with the statement whose Sid is on line `index` granting nothing it did."""
    lines = text.split("\n")
    indent = len(lines[index]) - len(lines[index].lstrip()) + 2
    for j in range(index + 1, len(lines)):
        line = lines[j]
        if line.strip().startswith("- ") and len(line) - len(line.lstrip()) <= indent - 2:
            break
        if line.lstrip().startswith("Action:"):
            lines[j] = " " * (len(line) - len(line.lstrip())) + "Action: sts:GetCallerIdentity"
            return "\n".join(lines)
    raise SystemExit(f"no one-line Action after line {index + 1}")


def run(out_dir, text, stmt):
    index, sid, owner = stmt
    name = f"{owner}-{sid}"
    variant = os.path.join(out_dir, f"{name}.yaml")
    with open(variant, "w") as f:
        f.write(without(text, index))
    log = os.path.join(out_dir, f"{name}.log")
    env = {**os.environ, "CHARGE_ONCE_TEMPLATE": variant, "DEPLOY_LOCAL_DIR": os.path.join(out_dir, name)}
    with open(log, "w") as f:
        rc = subprocess.run([os.path.join(HERE, "run.sh")], env=env, stdout=f, stderr=subprocess.STDOUT,
                            timeout=900).returncode
    failed = ""
    with open(log, errors="replace") as f:
        for line in f:
            if "FAILED at step" in line or "the deploy failed" in line:
                failed = line.strip()[:300]
                break
    verdict = f"needed: {failed}" if rc != 0 else "NOT NEEDED by the scenario (it passed without it)"
    return f"{owner}/{sid} (line {index + 1}): {verdict}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(ROOT, "template.yaml")) as f:
        text = f.read()
    todo = statements(text)
    if args.only:
        wanted = set(args.only.split(","))
        todo = [s for s in todo if s[1] in wanted or f"{s[2]}/{s[1]}" in wanted]
    print(f"statements: {len(todo)} to try, {args.jobs} at a time", file=sys.stderr, flush=True)
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for line in pool.map(lambda s: run(args.out_dir, text, s), todo):
            print(line, flush=True)


if __name__ == "__main__":
    main()
