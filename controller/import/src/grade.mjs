// eval's wrapper around v0.4's `simple` grader (written by `eval import v04-simple`).
//
//   node /hidden/grade.mjs WORKSPACE HIDDEN OUT
//
// Grades the read-only WORKSPACE with v0.4's own gradeSimpleTask (HIDDEN/driver/lib/
// simple-grader.mjs, copied unchanged) against the task in HIDDEN/task.json and writes OUT
// (eval's score.json: numeric `metrics`, the rest informational). Any failure to grade is a
// non-zero exit, which eval records as an unscorable workspace.
import { cp, mkdir, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'

const [workspace, hidden, out] = process.argv.slice(2)
if (!workspace || !hidden || !out) {
  process.stderr.write('usage: grade.mjs WORKSPACE HIDDEN OUT\n')
  process.exit(2)
}

// eval's grader container has a read-only root and a noexec /tmp, and gives the grader only its
// image's environment. `go test` needs a writable build cache and an executable directory for
// the test binaries it runs: the runtime mounts an exec tmpfs here, and the grader's children
// inherit this environment (simple-grader spreads process.env). GOTOOLCHAIN=local and GOPROXY=off:
// the container has no network, so Go must never try to fetch a toolchain or a module.
const scratch = process.env.EVAL_GRADER_SCRATCH ?? '/var/cache/grader'
Object.assign(process.env, {
  HOME: scratch,
  GOCACHE: join(scratch, 'go-build'),
  GOTMPDIR: join(scratch, 'go-tmp'),
  GOPATH: join(scratch, 'go'),
  GOTOOLCHAIN: 'local',
  GOPROXY: 'off',
})
await mkdir(process.env.GOTMPDIR, { recursive: true })

const task = JSON.parse(await readFile(join(hidden, 'task.json'), 'utf8'))
// The grader image carries Go's build cache for the standard library the hidden tests import
// (runtimes/images/v04-grader/build.sh); Go writes to its cache, so it is copied, and only for a
// Go task (the copy lives in memory). Without it Go compiles the standard library itself.
const warmCache = '/opt/go-cache'
if (task.language === 'Go') {
  await cp(warmCache, process.env.GOCACHE, { recursive: true }).catch((error) => {
    process.stderr.write(`no warm Go cache (${error.code ?? error.message}); compiling from scratch\n`)
  })
}
const { gradeSimpleTask } = await import(new URL('./driver/lib/simple-grader.mjs', import.meta.url))
const result = await gradeSimpleTask(task, workspace)
const passed = result.checks.filter((check) => check.passed === true).length
if (result.maxScore !== result.checks.length || result.score !== passed || result.maxScore === 0) {
  throw new Error(`inconsistent grade for ${task.id}: ${JSON.stringify(result)}`)
}
// Beside v0.4's grading, never instead of it: eval's hardened grading of the same assertions
// (HIDDEN/hardened.mjs; each case in its own child, compared here). Which one gates is the
// protocol's choice of metric.
const { gradeHardened } = await import(new URL('./hardened.mjs', import.meta.url))
const hardened = await gradeHardened(task, workspace)
if (hardened.length !== result.maxScore) {
  throw new Error(`hardened grading of ${task.id}: ${hardened.length} checks, v0.4 has ${result.maxScore}`)
}
const hardenedPassed = hardened.filter((passed) => passed === true).length
const score = {
  metrics: {
    // v0.4's points: score / maxScore x 100 (20 per assertion for its five).
    score: (100 * result.score) / result.maxScore,
    checks_passed: result.score,
    checks_total: result.maxScore,
    hardened_score: (100 * hardenedPassed) / hardened.length,
    hardened_checks_passed: hardenedPassed,
  },
  task: task.id,
  checks: result.checks,
  hardened_checks: task.graderAssertions.map((name, index) => ({ name, passed: hardened[index] === true })),
  grader_digest: result.graderDigest,
}
await writeFile(out, `${JSON.stringify(score, null, 2)}\n`)
