// eval's hardened grading of v0.4's `simple` assertions (written by `eval import v04-simple`
// beside v0.4's own grader, never instead of it).
//
// v0.4's checks run inside a child the agent's module shares and read a boolean array from that
// child's stdout, so a module that prints the array and exits passes them. Here every case runs
// in a child of its own that receives only the case's inputs and a fresh random nonce on stdin
// and reports what the function returned (or which error class it threw) on a line tagged with
// the nonce; the expected values stay in this process, which compares. A child that prints
// anything else, exits early, or never answers fails its case. What this cannot stop: a module
// that reads this file from the grader's hidden directory and answers its cases from it
// (memorising the test cases); the grader's files are readable by the process it grades.
// One deliberate difference: v0.4 counts a TypeError from calling a missing export as the
// function's TypeError; here a missing export fails every case.
import { spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { cp, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { basename, join, relative } from 'node:path'
import { pathToFileURL } from 'node:url'

const IGNORED_ROOTS = new Set(['.dsh', '.git', 'node_modules', '__pycache__'])
const CASE_TIMEOUT_MS = 30_000

const JS_RUNNER = `
let input = ''
for await (const chunk of process.stdin) input += chunk
const { nonce, url, symbol, args, probe } = JSON.parse(input)
let report
try {
  const mod = await import(url)
  const fn = mod[symbol]
  if (probe === 'typeof') report = { value: typeof fn }
  // A missing export is not the function throwing: calling undefined throws a TypeError, which
  // would pass an "error classes" case of its own.
  else if (typeof fn !== 'function') report = { error: 'not-a-function' }
  else {
    try { report = { value: fn(...args) } } catch (error) {
      report = { error: error instanceof RangeError ? 'RangeError' : error instanceof TypeError ? 'TypeError' : 'other' }
    }
  }
} catch { report = { error: 'import' } }
process.stdout.write('\\nEVAL-CASE ' + nonce + ' ' + JSON.stringify(report) + '\\n')
`

const PY_RUNNER = `
import importlib.util, json, sys
req = json.loads(sys.stdin.read())
report = None
try:
    spec = importlib.util.spec_from_file_location('submission', req['file'])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, req['symbol'])
    args = req['args']
    try:
        value = fn(*args)
        report = {'value': value, 'after': args}
    except ValueError:
        report = {'error': 'ValueError'}
    except Exception:
        report = {'error': 'other'}
except BaseException:
    report = {'error': 'import'}
sys.stdout.write('\\nEVAL-CASE ' + req['nonce'] + ' ' + json.dumps(report) + '\\n')
sys.stdout.flush()
`

function run(command, args, cwd, stdin, env = {}) {
  const r = spawnSync(command, args, {
    cwd,
    input: stdin,
    encoding: 'utf8',
    timeout: CASE_TIMEOUT_MS,
    maxBuffer: 8 * 1024 * 1024,
    env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1', ...env },
  })
  return r.stdout ?? ''
}

/// The report on the line tagged with `nonce`, or null.
function reportOf(stdout, nonce) {
  const tag = `EVAL-CASE ${nonce} `
  const line = stdout.split('\n').find((l) => l.startsWith(tag))
  if (!line) return null
  try {
    return JSON.parse(line.slice(tag.length))
  } catch {
    return null
  }
}

const nonce = () => randomBytes(16).toString('hex')
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b)

function jsCase(workspace, file, symbol, args, { probe, strip } = {}) {
  const n = nonce()
  const url = `${pathToFileURL(join(workspace, file)).href}?case=${n}`
  const flags = strip ? ['--experimental-strip-types'] : []
  const out = run(process.execPath, [...flags, '--input-type=module', '-e', JS_RUNNER], workspace,
    JSON.stringify({ nonce: n, url, symbol, args, probe }))
  return reportOf(out, n)
}

function pyCase(workspace, file, symbol, args) {
  const n = nonce()
  const out = run('python3', ['-I', '-c', PY_RUNNER], workspace,
    JSON.stringify({ nonce: n, file: join(workspace, file), symbol, args }))
  return reportOf(out, n)
}

const returns = (r, v) => r !== null && 'value' in r && same(r.value, v)
const throws = (r, e) => r !== null && r.error === e

function javascript(workspace, file, symbol) {
  const c = (...args) => jsCase(workspace, file, symbol, args)
  if (symbol === 'clamp') {
    return [
      returns(jsCase(workspace, file, symbol, [], { probe: 'typeof' }), 'function'),
      returns(c(-2, 0, 10), 0) && returns(c(20, 0, 10), 10),
      returns(c(4, 0, 10), 4),
      throws(c(0, 2, 1), 'RangeError'),
    ]
  }
  return [
    returns(c('1'), 1) && returns(c('65535'), 65535),
    returns(c(' 8080 '), 8080),
    ['1.5', '+1', '-1', '1e2', '', '0', '65536'].every((v) => throws(c(v), 'RangeError')),
    throws(c(80), 'TypeError'),
  ]
}

function typescript(workspace) {
  const c = (s) => jsCase(workspace, 'src/slugify.ts', 'slugify', [s], { strip: true })
  return [
    returns(c('Hello WORLD'), 'hello-world'),
    returns(c('a___b...c'), 'a-b-c'),
    returns(c(' --A B-- '), 'a-b'),
    returns(c('   '), ''),
  ]
}

function python(workspace, chunks) {
  if (!chunks) {
    const c = (s) => pyCase(workspace, 'text_utils.py', 'normalize_whitespace', [s])
    return [
      returns(c('  a   b '), 'a b'),
      returns(c('a\t\n b'), 'a b'),
      returns(c('a\u2003\u00a0b'), 'a b'),
      returns(c(''), ''),
    ]
  }
  const c = (...args) => pyCase(workspace, 'chunks.py', 'chunks', args)
  const immutable = c([1, 2, 3], 2)
  return [
    returns(c([1, 2, 3, 4], 2), [[1, 2], [3, 4]]),
    returns(c([1, 2, 3], 2), [[1, 2], [3]]),
    returns(c([], 3), []),
    [true, false, 0, -1, 1.5, '2'].every((size) => throws(c([1], size), 'ValueError')),
    immutable !== null && 'value' in immutable && same(immutable.value, [[1, 2], [3]]) && same(immutable.after, [[1, 2, 3], 2]),
  ]
}

const GO_CASES = {
  stable: 'got := DedupeStable([]string{"b", "a", "b", "c", "a"}); report(map[string]any{"value": got, "nil": got == nil})',
  immutable: 'in := []string{"a", "a"}; got := DedupeStable(in); if len(got) > 0 { got[0] = "x" }; report(map[string]any{"in": in})',
  nil: 'got := DedupeStable(nil); report(map[string]any{"nil": got == nil})',
  empty: 'got := DedupeStable([]string{}); report(map[string]any{"nil": got == nil, "len": len(got)})',
}

async function goCase(workspace, name) {
  const n = nonce()
  const file = join(workspace, 'zz_eval_hardened_case_test.go')
  await writeFile(file, `package dedupe

import (
\t"encoding/json"
\t"os"
\t"testing"
)

func TestEvalHardenedCase(t *testing.T) {
\treport := func(v map[string]any) {
\t\tb, _ := json.Marshal(v)
\t\tos.Stdout.WriteString("\\nEVAL-CASE " + os.Getenv("EVAL_CASE_NONCE") + " " + string(b) + "\\n")
\t}
\t${GO_CASES[name]}
}
`)
  const out = run('go', ['test', '-count=1', '-v', '-run', '^TestEvalHardenedCase$', '.'], workspace, '', { EVAL_CASE_NONCE: n })
  await rm(file, { force: true })
  return reportOf(out, n)
}

async function go(workspace) {
  const stable = await goCase(workspace, 'stable')
  const immutable = await goCase(workspace, 'immutable')
  const nil = await goCase(workspace, 'nil')
  const empty = await goCase(workspace, 'empty')
  return [
    stable !== null && same(stable.value, ['b', 'a', 'c']) && stable.nil === false,
    immutable !== null && same(immutable.in, ['a', 'a']),
    nil !== null && nil.nil === true,
    empty !== null && empty.nil === false && empty.len === 0,
  ]
}

async function inventory(root, directory = root) {
  const files = []
  for (const entry of await readdir(directory, { withFileTypes: true })) {
    if (directory === root && IGNORED_ROOTS.has(entry.name)) continue
    const path = join(directory, entry.name)
    if (entry.isDirectory()) files.push(...await inventory(root, path))
    else files.push(relative(root, path))
  }
  return files.sort()
}

// The non-executing checks, as v0.4 states them (they read files, never run the agent's code).
async function noDependencies(workspace) {
  try {
    const manifest = JSON.parse(await readFile(join(workspace, 'package.json'), 'utf8'))
    return ['dependencies', 'devDependencies', 'optionalDependencies', 'peerDependencies']
      .every((key) => Object.keys(manifest[key] ?? {}).length === 0)
  } catch {
    return false
  }
}

async function onlyTargetChanged(workspace, task, target) {
  if (!same(await inventory(workspace), Object.keys(task.initialFiles).sort())) return false
  for (const [path, content] of Object.entries(task.initialFiles)) {
    if (path !== target && await readFile(join(workspace, path), 'utf8') !== content) return false
  }
  return true
}

function pythonStandardLibraryOnly(workspace, file) {
  const source = `
import ast, json, pathlib, sys
tree = ast.parse(pathlib.Path(sys.argv[1]).read_text())
roots = []
for node in ast.walk(tree):
    if isinstance(node, ast.Import): roots.extend(alias.name.split('.')[0] for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module: roots.append(node.module.split('.')[0])
print(json.dumps(all(name in sys.stdlib_module_names for name in roots)))
`
  return run('python3', ['-I', '-c', source, join(workspace, file)], workspace, '').trim() === 'true'
}

async function goNoExternalDependencies(workspace) {
  const module = await readFile(join(workspace, 'go.mod'), 'utf8').catch(() => '')
  return !/^\s*require\s/m.test(module) && !(await inventory(workspace)).some((p) => basename(p) === 'go.sum')
}

/// The same assertions as v0.4's gradeSimpleTask, in the same order, each case in its own child.
export async function gradeHardened(task, sourceWorkspace) {
  const root = await mkdtemp(join(tmpdir(), 'eval-hardened-'))
  const workspace = join(root, 'submission')
  await cp(sourceWorkspace, workspace, { recursive: true })
  try {
    switch (task.id) {
      case 'simple-js-clamp':
        return [...javascript(workspace, 'src/clamp.js', 'clamp'), await noDependencies(workspace)]
      case 'simple-ts-slugify':
        return [...typescript(workspace), await onlyTargetChanged(workspace, task, 'src/slugify.ts')]
      case 'simple-python-whitespace':
        return [...python(workspace, false), pythonStandardLibraryOnly(workspace, 'text_utils.py')]
      case 'simple-go-dedupe':
        return [...await go(workspace), await goNoExternalDependencies(workspace)]
      case 'simple-js-parse-port':
        return [...javascript(workspace, 'src/port.js', 'parsePort'), await noDependencies(workspace)]
      case 'simple-python-chunks':
        return python(workspace, true)
      default:
        throw new Error(`unknown simple task ${task.id}`)
    }
  } finally {
    await rm(root, { recursive: true, force: true })
  }
}
