#!/usr/bin/env python3
"""Generates eval's stand-in task bundles, arm profiles and packages .

Usage: protocols/tools/gen-stand-in-bundles.py REPO
Writes protocols/v0.4/{tasks,arms} and protocols/init-template/ (protocol `demo`, matrix `demo`).
"""
import os, sys, textwrap, shutil

REPO = sys.argv[1]

SUITES_V04 = {
    "simple": ["simple-js-clamp", "simple-ts-slugify", "simple-python-whitespace",
               "simple-go-dedupe", "simple-js-parse-port", "simple-python-chunks"],
    "icae": ["icae-js-ts-01", "icae-js-ts-02", "icae-python-01", "icae-python-02",
             "icae-go-01", "icae-go-02"],
    "evocode": ["theme_d1_w1_code_build_greenfield_implementation",
                "theme_d1_w5_code_build_integration_e2e_wiring",
                "theme_d6_w1_database_storage_greenfield_implementation"],
}
SUITES_DEMO = {
    "simple": ["demo-simple-1", "demo-simple-2", "demo-simple-3", "demo-simple-4",
               "demo-simple-5", "demo-simple-6"],
    "icae": ["demo-icae-1", "demo-icae-2", "demo-icae-3", "demo-icae-4",
             "demo-icae-5", "demo-icae-6"],
    "evocode": ["demo-evocode-1", "demo-evocode-2", "demo-evocode-3"],
}

def ext_of(task):
    for key, ext in (("-ts", "ts"), ("-js", "js"), ("python", "py"), ("-go", "go")):
        if key in task:
            return ext
    return "py"

def comment(ext):
    return "#" if ext == "py" else "//"

def write(path, text, exec_=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755 if exec_ else 0o644)

def toml_str(s):
    return '"""\n' + s + '"""'

GRADER = '''[grader]
runtime = "runtimes/fixture/runtime.toml"
command = [
  "/usr/local/bin/eval-fixture-grader",
  "--workspace", "{workspace}",
  "--hidden", "{hidden}",
  "--out", "{out}",
]
'''

def task_toml(task, suite, metrics, oracle):
    t = f'''# STAND-IN task bundle: a small fixture task under the real task id. The real benchmark task
# is not shipped here; see {DOC} ("Swapping in real tasks and runtimes").
id = "{task}"
suite = "{suite}"
timeout_seconds = 3600
metrics = [{", ".join('"%s"' % m for m in metrics)}]
stand_in = true

''' + GRADER
    if DOC == "README.md":
        t = t.replace("a small fixture task under the real task id. The real benchmark task\n# is not shipped here; see", "a small fixture task of the demo; to evaluate for real, see")
    if oracle:
        t += '''
[oracle]
answers = "hidden/oracle.toml"
max_questions = 5
'''
    return t

DOC = 'protocols/v0.4/README.md'

def gen_task(root, suite, task):
    d = os.path.join(root, task)
    if os.path.exists(d):
        shutil.rmtree(d)
    ext = ext_of(task)
    c = comment(ext)
    reqs, checks, qa = [], [], []
    ws = {}
    if suite == "simple":
        ws[f"src/main.{ext}"] = f"{c} {task}: implement the five requirements in src/\n"
        for i in range(1, 6):
            mark = f"{task}-r{i}-ok"
            reqs.append(dict(id=f"r{i}", path=f"src/part{i}.{ext}",
                             content=f"{c} requirement r{i}\n{c} {mark}\n",
                             wrong=f"{c} requirement r{i}: TODO\n"))
            checks.append(dict(id=f"r{i}", path=f"src/part{i}.{ext}", contains=mark, points=20))
        metrics = ["score", "checks_passed", "checks_total", "critical_missed", "regressions"]
        alias = {}
    elif suite == "icae":
        ws[f"README.md"] = f"# {task}\n\nA small product build with ambiguous requirements (stand-in).\n"
        for i in range(1, 4):
            mark = f"{task}-feature{i}-ok"
            reqs.append(dict(id=f"f{i}", path=f"app/feature{i}.{ext}",
                             content=f"{c} feature {i}\n{c} {mark}\n",
                             wrong=f"{c} feature {i}: unfinished\n"))
            checks.append(dict(id=f"f{i}", path=f"app/feature{i}.{ext}", contains=mark, points=20))
        for i in range(1, 3):
            mark = f"{task}-critical{i}-answer"
            q = f"{task}: which behaviour does critical requirement {i} need?"
            reqs.append(dict(id=f"c{i}", path=f"app/critical{i}.{ext}", ambiguous=True,
                             question=q, content=f"{c} critical {i}: guessed behaviour\n"))
            checks.append(dict(id=f"c{i}", path=f"app/critical{i}.{ext}", contains=mark,
                               points=20, critical=True))
            qa.append((q, f"{c} critical {i}\n{c} {mark}\n"))
        metrics = ["score", "checks_passed", "checks_total", "critical_missed", "regressions",
                   "hidden_score"]
        alias = {"hidden_score": "score"}
    else:
        for i in range(1, 3):
            ws[f"src/stage{i}.{ext}"] = f"{c} stage {i} (round 1)\n{c} {task}-stage{i}-keep\n"
        for i in range(1, 3):
            keep = f"{task}-stage{i}-keep"
            new = f"{task}-stage{i}-round2"
            reqs.append(dict(id=f"s{i}", path=f"src/stage{i}.{ext}",
                             content=f"{c} stage {i} (round 2)\n{c} {keep}\n{c} {new}\n",
                             wrong=f"{c} stage {i} rewritten from scratch\n{c} {new}\n"))
            checks.append(dict(id=f"s{i}-keeps-round1", path=f"src/stage{i}.{ext}",
                               contains=keep, points=20, regression=True))
            checks.append(dict(id=f"s{i}-round2", path=f"src/stage{i}.{ext}",
                               contains=new, points=20))
        mark = f"{task}-round3-ok"
        reqs.append(dict(id="r3", path=f"src/stage3.{ext}",
                         content=f"{c} stage 3 (round 3)\n{c} {mark}\n",
                         wrong=f"{c} stage 3: TODO\n"))
        checks.append(dict(id="r3", path=f"src/stage3.{ext}", contains=mark, points=20))
        metrics = ["score", "checks_passed", "checks_total", "critical_missed", "regressions",
                   "cumulative_score"]
        alias = {"cumulative_score": "score"}

    write(os.path.join(d, "task.toml"), task_toml(task, suite, metrics, bool(qa)))
    # prompt.md with the fixture block
    block = f'task = "{task}"\n'
    for r in reqs:
        block += "\n[[requirement]]\n"
        block += f'id = "{r["id"]}"\npath = "{r["path"]}"\n'
        if r.get("ambiguous"):
            block += "ambiguous = true\n"
            block += f'question = "{r["question"]}"\n'
        block += f'content = {toml_str(r["content"])}\n'
        if "wrong" in r:
            block += f'wrong = {toml_str(r["wrong"])}\n'
    kind = {"simple": "a simple single-file task",
            "icae": "an ambiguous product build (ask about critical requirements you cannot infer)",
            "evocode": "a multi-round dynamic-requirements task (keep earlier rounds working)"}[suite]
    prompt = f"""# {task} (stand-in)

This is a STAND-IN for the real `{task}` task: {kind}. It is written for the project's fixture
agent and fixture model, whose requirements are listed in the block below. Replace this bundle
with the real task to evaluate a real harness.

```fixture
{block}```
"""
    write(os.path.join(d, "prompt.md"), prompt)
    for rel, text in ws.items():
        write(os.path.join(d, "workspace", rel), text)
    ck = ""
    for chk in checks:
        ck += "[[check]]\n"
        ck += f'id = "{chk["id"]}"\npath = "{chk["path"]}"\ncontains = "{chk["contains"]}"\npoints = {chk["points"]}\n'
        if chk.get("critical"):
            ck += "critical = true\n"
        if chk.get("regression"):
            ck += "regression = true\n"
        ck += "\n"
    if alias:
        ck += "[alias]\n" + "".join(f'{k} = "{v}"\n' for k, v in alias.items())
    write(os.path.join(d, "hidden", "checks.toml"), ck)
    if qa:
        o = "# Scripted oracle: exact-match answers to the fixture agent's clarifying questions.\n"
        for q, a in qa:
            o += f'\n[[qa]]\nquestion = "{q}"\nanswer = {toml_str(a)}\n'
        write(os.path.join(d, "hidden", "oracle.toml"), o)

PROFILES = {
    # arm: (skill, clarify, plan_turn, padding, description)
    "native": (0.5, "never", False, 0, "the native harness, no plugin"),
    "v0.3-always": (0.5, "never", True, 200, "plugin v0.3.0, intakeMode off: always plans first"),
    "v0.4-auto": (0.5, "never", False, 0, "plugin v0.4, activationMode auto: stays out of simple tasks"),
    "v0.4-never": (0.5, "never", True, 100, "plugin v0.4, clarificationPolicy never"),
    "v0.4-critical": (0.5, "critical", True, 100, "plugin v0.4, clarificationPolicy critical"),
    "v0.4-contract": (0.7, "never", True, 100, "plugin v0.4, controlCeiling contract"),
    "v0.4-lattice": (0.9, "critical", True, 150, "plugin v0.4, controlCeiling lattice"),
}
SETTINGS = {
    "v0.3-always": {"pluginVersion": "0.3.0", "intakeMode": "off"},
    "v0.4-auto": {"pluginVersion": "0.4.0-rc.3", "activationMode": "auto"},
    "v0.4-never": {"pluginVersion": "0.4.0-rc.3", "clarificationPolicy": "never"},
    "v0.4-critical": {"pluginVersion": "0.4.0-rc.3", "clarificationPolicy": "critical"},
    "v0.4-contract": {"pluginVersion": "0.4.0-rc.3", "activationMode": "always", "controlCeiling": "contract"},
    "v0.4-lattice": {"pluginVersion": "0.4.0-rc.3", "activationMode": "always", "controlCeiling": "lattice"},
}

def gen_arm(root, arm):
    d = os.path.join(root, arm)
    if os.path.exists(d):
        shutil.rmtree(d)
    skill, clarify, plan, pad, desc = PROFILES[arm]
    prof = f'''# STAND-IN profile for arm `{arm}` ({desc}). It drives the project's fixture agent so
# that the arms really differ; a real harness runtime reads its own profile format instead.
name = "stand-in-{arm}"
model = "deepseek-v4-flash"
temperature = 0.0
max_tokens = 32768
stream = true
skill = {skill}
max_turns = 8
edits_per_turn = 2
plan_turn = {"true" if plan else "false"}
padding_tokens = {pad}
clarify = "{clarify}"
max_questions = 5
'''
    write(os.path.join(d, "profile.toml"), prof)
    if arm in SETTINGS:
        import json
        s = SETTINGS[arm]
        pkg = {"name": "plan-lattice-stand-in", "version": s["pluginVersion"] + "-stand-in",
               "description": f"STAND-IN for the Plan Lattice candidate package of arm {arm}; not the real plugin.",
               "main": "index.js"}
        write(os.path.join(d, "package", "package.json"), json.dumps(pkg, indent=2) + "\n")
        write(os.path.join(d, "package", "settings.json"), json.dumps(s, indent=2, sort_keys=True) + "\n")
        write(os.path.join(d, "package", "index.js"),
              "// STAND-IN: the real candidate package is installed here by swapping this directory.\n"
              f"module.exports = {{ standIn: true, arm: {json.dumps(arm)} }};\n")

def main():
    base = os.path.join(REPO, "protocols", "v0.4")
    for suite, tasks in SUITES_V04.items():
        for t in tasks:
            gen_task(os.path.join(base, "tasks", suite), suite, t)
    for arm in PROFILES:
        gen_arm(os.path.join(base, "arms"), arm)
    tpl = os.path.join(REPO, "protocols", "init-template")
    for sub in ("protocols/demo/tasks", "protocols/demo/arms"):
        p = os.path.join(tpl, sub)
        if os.path.exists(p):
            shutil.rmtree(p)
    global DOC
    DOC = "README.md"
    for suite, tasks in SUITES_DEMO.items():
        for t in tasks:
            gen_task(os.path.join(tpl, "protocols", "demo", "tasks", suite), suite, t)
    for arm in PROFILES:
        gen_arm(os.path.join(tpl, "protocols", "demo", "arms"), arm)

main()

def gen_demo_protocol():
    src = open(os.path.join(REPO, "protocols", "v0.4", "protocol.toml")).read()
    head, rest = src.split("schema = 1\n", 1)
    header = """# Protocol `demo`, scaffolded by `eval init`: shaped exactly like v0.4 (three suites, per-suite
# arms, two repetitions, six infrastructure slots, the same gates and thresholds) with small
# fixture task bundles of its own and the fixture runtime, so the whole pipeline runs without a
# real harness or model key:
#
#   eval freeze --protocol demo
#   eval run --matrix demo --upstream fixture
#   eval report --matrix demo
#
# Everything here is a STAND-IN. To evaluate for real, copy this protocol to a new name, point the
# arms at real harness runtimes and the matrix at real task bundles, then freeze that name.
"""
    rest = rest.replace('name = "v0.4"', 'name = "demo"', 1)
    rest = rest.replace('matrix = "v0.4"', 'matrix = "demo"', 1)
    rest = rest.replace('title = "Plan Lattice v0.4:', 'title = "Demo (v0.4-shaped, fixture stand-ins):', 1)
    rest = rest.replace("protocols/v0.4/", "protocols/demo/")
    rest = rest.replace("matrix/v0.4.toml", "matrix/demo.toml")
    # No preconditions: the demo is self-contained (a fixture run can never be evidence anyway).
    a = rest.index("# Paid runs require the separate")
    b = rest.index("# Release gates: all must pass.")
    rest = rest[:a] + rest[b:]
    out = header + "schema = 1\n" + rest
    write(os.path.join(REPO, "protocols", "init-template", "protocols", "demo", "protocol.toml"), out)

    m = open(os.path.join(REPO, "matrix", "v0.4.toml")).read()
    m = m.split('name = "v0.4"', 1)[1]
    m = '# Matrix `demo` (scaffolded by `eval init`): v0.4-shaped, 90 statistical + 6 infrastructure slots.\nname = "demo"' + m
    m = m.replace('protocol = "v0.4"', 'protocol = "demo"', 1)
    m = m.replace('description = "Plan Lattice v0.4 external model evaluation (task bundles and arm runtimes are stand-ins)"',
                  'description = "Demo matrix: v0.4-shaped, fixture stand-ins"')
    m = m.replace('algorithm = "mulberry32-fisher-yates"\nseed_string = "plan-lattice-v0.4-blind-90-2026-08-15"',
                  'algorithm = "chacha8"\nseed = 2026')
    m = m.replace("protocols/v0.4/", "protocols/demo/")
    for suite, tasks in SUITES_V04.items():
        for old, new in zip(tasks, SUITES_DEMO[suite]):
            m = m.replace(f'"{old}"', f'"{new}"')
    m = m.replace("# The v0.4 matrix exactly as its authors designed it (see protocols/v0.4/README.md):\n", "")
    write(os.path.join(REPO, "protocols", "init-template", "matrix", "demo.toml"), m)

gen_demo_protocol()
