"""eval's grader of a task imported by `eval import v04-icae`, in eval's two stages.

It follows the rules of ICAE-EVAL's harness/evaluate.py (ALEX-nlp/ICAE-EVAL b33fe65), which
keeps the expected outputs on the host and compares there; eval's two stages (docs/grading.md,
"Grading in two stages") do the same:

  grade.py run WORKSPACE INPUTS CAPTURE   the run stage (runs the agent's code): INPUTS is the
    task's hidden/public/, the tiers' cases with every expected_output stripped at import
    (evaluate.py's _sanitize_cases; a file that does not parse became {"cases": []}) and this
    file. For each tier (public_test_cases, test_cases, enhanced_test_cases) a fresh copy of the
    agent's workspace, the tier's sanitized cases injected into rcb_tests/<tier>/, evaluate.py's
    sed of rcb_tests/test.sh, the agent's own `bash -x rcb_tests/test.sh --cases-dir <tier>`;
    its rcb_tests/stdout/<tier>/*.txt (regular files, each at most OUTPUT_CAP) and its trace go
    into CAPTURE/<tier>/ and CAPTURE/logs/. No expected output exists in this container.
  grade.py score HIDDEN CAPTURE SCORE_JSON  the score stage (runs no agent code, sees no
    workspace): each case's captured output <stem>@<N>.txt compared byte for byte (as text, utf-8
    with replacement) with the authoritative expected_output of HIDDEN/cases/<tier>/ (json.dumps
    of a non-string), the output index base being the smallest index the agent wrote for that
    stem.

score.json: metrics hidden_score = 100 * (hidden passed + enhanced passed) / (hidden total +
enhanced total) (v0.4's hiddenFeatureScore; 0 when there is no total or no rcb_tests/test.sh) and
each tier's passed and total; `objective` is evaluate.py's objective.json for the attempt.

Deviations from ICAE, declared in the protocol: the tiers run in one network-less grader
container one after the other (ICAE: a fresh networked container per tier), each for at most
TIER_SECONDS (ICAE: 2400 s), because eval's grader has 600 s in all.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

SUBDIRS = {
    "public_test_cases": "public",
    "test_cases": "hidden",
    "enhanced_test_cases": "enhanced",
}
TIER_SECONDS = 180
# The grader runtime's writable, executable tmpfs (tmpfs_exec); the variable lets eval's tests
# run this file on a host (the grader container's environment never sets it).
SCRATCH = Path(os.environ.get("EVAL_ICAE_GRADER_SCRATCH", "/var/cache/grader"))
# The most bytes of one captured output compared (a longer one cannot equal an expected
# output of v0.4's size and is compared truncated, so it fails) and of a tier's trace kept.
OUTPUT_CAP = 4 << 20
TRACE_TAIL = 64 << 10


def sanitize(src: Path, dst: Path) -> None:
    """evaluate.py _sanitize_cases: the cases without expected_output, fail-closed."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.glob("*.json")):
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
            for case in data.get("cases", []):
                if isinstance(case, dict):
                    case.pop("expected_output", None)
            payload = json.dumps(data, ensure_ascii=False)
        except Exception:
            payload = json.dumps({"cases": []})
        (dst / f.name).write_text(payload, encoding="utf-8")


def outputs_for_stem(out_dir: Path, stem: str) -> dict:
    pat = re.compile(re.escape(stem) + r"@(\d+)\.txt$")
    out = {}
    if not out_dir.is_dir():
        return out
    for pth in out_dir.iterdir():
        m = pat.match(pth.name)
        if m:
            out[int(m.group(1))] = pth
    return out


def read_output(pth: Path):
    if pth.is_symlink() or not pth.is_file():
        return None
    with open(pth, "rb") as fh:
        raw = fh.read(OUTPUT_CAP)
    # As Path.read_text(encoding="utf-8", errors="replace"): universal newlines.
    text = raw.decode("utf-8", errors="replace")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def host_compare(cases_dir: Path, out_dir: Path):
    """evaluate.py _host_compare: (passed, total, diag)."""
    p = t = 0
    missing = 0
    mismatches = []
    for f in sorted(cases_dir.glob("*.json")):
        stem = f.stem
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except Exception:
            continue
        cases = data.get("cases", [])
        outs = outputs_for_stem(out_dir, stem)
        base = min(outs) if outs else 0
        for i, case in enumerate(cases):
            t += 1
            exp = case.get("expected_output", "") if isinstance(case, dict) else ""
            if not isinstance(exp, str):
                exp = json.dumps(exp)
            pth = outs.get(i + base)
            actual = read_output(pth) if pth else None
            if actual is None:
                missing += 1
                if len(mismatches) < 3:
                    mismatches.append({"case": f"{stem}[{i}]", "kind": "missing_output"})
            elif actual == exp:
                p += 1
            elif len(mismatches) < 3:
                mismatches.append({"case": f"{stem}[{i}]", "kind": "mismatch"})
    return p, t, {"missing": missing, "mismatches": mismatches}


def auth_total(cases_dir: Path) -> int:
    total = 0
    for f in sorted(cases_dir.glob("*.json")):
        try:
            total += len(json.loads(f.read_text(encoding="utf-8")).get("cases", []))
        except Exception:
            pass
    return total


def env() -> dict:
    home = SCRATCH / "home"
    e = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": str(SCRATCH / "tmp"),
        "LANG": "C.UTF-8",
        "GOTOOLCHAIN": "local",
        "GOPROXY": "off",
        "GOFLAGS": "-mod=mod",
        "GOCACHE": str(SCRATCH / "go-cache"),
        "GOPATH": str(SCRATCH / "go"),
        "npm_config_cache": str(SCRATCH / "npm"),
        "npm_config_offline": "true",
        "PIP_NO_INDEX": "1",
    }
    for d in (home, SCRATCH / "tmp"):
        d.mkdir(parents=True, exist_ok=True)
    return e


def run_tier(workspace: Path, cases_dir: Path, sub: str, logs: Path) -> Path:
    """One tier in a fresh copy of the workspace; returns its rcb_tests/stdout/<sub>."""
    work = SCRATCH / "eval"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(workspace, work, symlinks=True)
    rcb = work / "rcb_tests"
    # A link would lead the injection out of the copy: rcb_tests is a directory here.
    if rcb.is_symlink():
        rcb.unlink()
    rcb.mkdir(exist_ok=True)
    shutil.rmtree(rcb / "stdout", ignore_errors=True)
    target = rcb / sub
    if target.is_symlink() or target.is_file():
        target.unlink()
    shutil.rmtree(target, ignore_errors=True)
    sanitize(cases_dir, target)
    test_sh = rcb / "test.sh"
    if test_sh.is_file() or test_sh.is_symlink():
        try:
            body = test_sh.read_bytes()
        except OSError:
            body = b""
        # evaluate.py's sed: the trace shows what test.sh silenced.
        body = body.replace(b" >/dev/null 2>&1", b" 2>&1")
        body = body.replace(b" 2>/dev/null", b" ").replace(b" >/dev/null", b" ")
        test_sh.unlink()
        test_sh.write_bytes(body)
    log = logs / f"{sub}.txt"
    with open(log, "wb") as fh:
        try:
            proc = subprocess.Popen(
                ["bash", "-x", "rcb_tests/test.sh", "--cases-dir", sub],
                cwd=work,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=env(),
                start_new_session=True,
            )
            try:
                rc = proc.wait(timeout=TIER_SECONDS)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                rc = "timeout"
        except OSError as e:
            rc = f"not started: {e}"
        fh.write(f"\n--- END test.sh trace rc={rc} ---\n".encode())
    # Keep the tail only: the grader's output is bounded.
    size = log.stat().st_size
    if size > TRACE_TAIL:
        with open(log, "rb") as fh:
            fh.seek(size - TRACE_TAIL)
            tail = fh.read()
        log.write_bytes(tail)
    return rcb / "stdout" / sub


def capture_tier(stdout: Path, dst: Path) -> None:
    """The tier's outputs, regular *.txt files only, each at most OUTPUT_CAP bytes."""
    dst.mkdir(parents=True, exist_ok=True)
    if stdout.is_symlink() or not stdout.is_dir():
        return
    for pth in sorted(stdout.iterdir()):
        if pth.is_symlink() or not pth.is_file() or not pth.name.endswith(".txt"):
            continue
        with open(pth, "rb") as fh:
            (dst / pth.name).write_bytes(fh.read(OUTPUT_CAP))


def run(workspace: Path, inputs: Path, capture: Path) -> int:
    logs = capture / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    test_sh = workspace / "rcb_tests" / "test.sh"
    ran = {"test_sh": test_sh.is_file() or test_sh.is_symlink(), "tiers": []}
    if ran["test_sh"]:
        for sub in SUBDIRS:
            cases_dir = inputs / "cases" / sub
            if not cases_dir.is_dir():
                continue
            outcap = run_tier(workspace, cases_dir, sub, logs)
            capture_tier(outcap, capture / sub)
            ran["tiers"].append(sub)
        shutil.rmtree(SCRATCH / "eval", ignore_errors=True)
    (capture / "ran.json").write_text(json.dumps(ran), encoding="utf-8")
    return 0


def score(hidden: Path, capture: Path, score_json: Path) -> int:
    logs = score_json.parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    objective = {}
    metrics = {}
    try:
        ran = json.loads((capture / "ran.json").read_text(encoding="utf-8"))
        test_sh = ran.get("test_sh") is True
    except Exception:
        test_sh = False
    if not test_sh:
        objective["error"] = "no rcb_tests/test.sh in generated code"
    else:
        for sub, metric in SUBDIRS.items():
            cases_dir = hidden / "cases" / sub
            name = {"public": "public_visible"}.get(metric, metric)
            if not cases_dir.is_dir():
                objective[name] = {"passed": 0, "total": 0, "rate": None,
                                   "note": f"no authoritative {sub}"}
                continue
            trace = capture / "logs" / f"{sub}.txt"
            if trace.is_file() and not trace.is_symlink():
                with open(trace, "rb") as fh:
                    (logs / f"{sub}.txt").write_bytes(fh.read(TRACE_TAIL))
            passed, total, diag = host_compare(cases_dir, capture / sub)
            at = auth_total(cases_dir)
            if at and total < at:
                total = at
            entry = {"passed": passed, "total": total,
                     "rate": round(passed / total, 4) if total else None}
            if passed != total:
                entry.update(diag)
            objective[name] = entry
    for metric in SUBDIRS.values():
        name = {"public": "public_visible"}.get(metric, metric)
        entry = objective.get(name, {})
        metrics[f"{metric}_passed"] = float(entry.get("passed") or 0)
        metrics[f"{metric}_total"] = float(entry.get("total") or 0)
    passed = metrics["hidden_passed"] + metrics["enhanced_passed"]
    total = metrics["hidden_total"] + metrics["enhanced_total"]
    metrics["hidden_score"] = 100.0 * passed / total if total else 0.0
    # The score file is new: a score stage never writes over one that is there.
    with open(score_json, "x", encoding="utf-8") as fh:
        fh.write(json.dumps({"metrics": metrics, "objective": objective}, indent=2, sort_keys=True))
    return 0


def main(argv) -> int:
    if len(argv) == 5 and argv[1] == "run":
        return run(*(Path(a) for a in argv[2:]))
    if len(argv) == 5 and argv[1] == "score":
        return score(*(Path(a) for a in argv[2:]))
    print("usage: grade.py run WORKSPACE INPUTS CAPTURE | grade.py score HIDDEN CAPTURE SCORE_JSON",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
