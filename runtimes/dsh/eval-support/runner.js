// eval's session runner for the DeepSeek Harness (headless): one session across the rounds of a
// multi-round attempt.
//
// The stock `headless-runner` (@deepseek-ai/dsh-headless) always creates a fresh session
// (`session-<random UUID>`), so a second `dsh --profile headless` could never continue the first.
// When the runtime's wrapper sets EVAL_DSH_SESSION_ID (it does so only in a multi-round attempt,
// where the shim sets EVAL_ROUND), this package's cordis.patch.yml disables the stock row and
// this runner takes its place: round 1 creates the session under that fixed id, every later
// round resumes it from the JSONL the earlier rounds flushed (`ctx.agents.resume`, the Harness's
// own continuation: the loaded event log seeds the live session, so the model sees the earlier
// rounds as history) and follows up with the round's prompt. Everything else is the stock
// runner's sequence: the model selection installed on the agent, the task as a user follow-up,
// the session flushed, the last assistant text printed, exit 0 only for a completed turn.
//
// A later round whose session cannot be resumed fails (exit 1, the reason on stderr); it never
// falls back to a fresh session, which would look like a continued one.
import { realpathSync } from 'node:fs'
import { createRequire } from 'node:module'
import { pathToFileURL } from 'node:url'

export const name = 'eval-session-runner'
export const inject = ['agentDefaultModel', 'agents', 'sessions']

/**
 * A Harness module, resolved as the stock runner resolves it: from @deepseek-ai/dsh-headless's
 * own dependencies, reached from the dsh launcher this process runs. The same file, so the same
 * module instance the Harness's plugins use.
 */
async function harness(specifier) {
  const launcher = realpathSync(process.argv[1])
  const headless = createRequire(launcher).resolve('@deepseek-ai/dsh-headless')
  return import(pathToFileURL(createRequire(headless).resolve(specifier)).href)
}

/** The round this process runs: EVAL_ROUND (1 when absent; anything but a positive integer is refused). */
function round() {
  const text = process.env.EVAL_ROUND ?? '1'
  const k = Number(text)
  if (!Number.isInteger(k) || k < 1) throw new Error(`EVAL_ROUND is ${JSON.stringify(text)}, not a round number`)
  return k
}

/** The last assistant text and the turn's end reason among the events from `firstSeq` on. */
function summarize(events, firstSeq) {
  let started = false
  let text = ''
  let reason
  for (const event of events) {
    if (event.seq < firstSeq) continue
    if (event.type === 'turn/start') {
      started = true
      continue
    }
    if (!started) continue
    if (event.type === 'assistant/message') {
      const joined = event.data.message.content
        .filter(block => block.type === 'text')
        .map(block => block.text)
        .join('')
      if (joined !== '') text = joined
    }
    if (event.type === 'turn/end') reason = event.data.reason
  }
  return { text, reason }
}

async function run(ctx, task, id, exit) {
  const k = round()
  const [{ installModelSelection }, { createUserMessage }, { SessionId }] = await Promise.all([
    harness('@deepseek-ai/dsh-agent'),
    harness('@deepseek-ai/dsh-llm'),
    harness('@deepseek-ai/dsh-session'),
  ])
  await ctx.get('loader')?.await()
  const agents = ctx.get('agents')
  const defaultModel = ctx.get('agentDefaultModel')
  const sessions = ctx.get('sessions')
  if (agents === undefined || defaultModel === undefined || sessions === undefined) return

  const selection = defaultModel.currentSelection()
  const agentOptions = { provider: selection.provider, model: selection.model }
  const setup = (agentCtx) => {
    installModelSelection(agentCtx, { current: selection, assembled: undefined })
  }
  const sessionId = SessionId(id)
  let agent
  if (k === 1) {
    ({ agent } = await agents.create({ sessionId, meta: { cwd: process.cwd() }, agentOptions, setup }))
  } else {
    try {
      ({ agent } = await agents.resume({ resumeSessionId: sessionId, agentOptions, setup }))
    } catch (error) {
      throw new Error(`round ${k}: cannot resume session ${JSON.stringify(id)}: ${error instanceof Error ? error.message : String(error)}`)
    }
  }
  await agent.whenIdle()
  const firstSeq = agent.session.seq
  agent.followup(createUserMessage({
    content: [{ type: 'text', text: task }],
    source: { kind: 'user' },
  }))
  await agent.whenIdle()
  await sessions.flush(agent.session)
  const outcome = summarize(agent.session.events, firstSeq)
  process.stdout.write(outcome.text + '\n')
  if (outcome.reason?.kind === 'error') {
    process.stderr.write(`dsh: ${outcome.reason.error.code}: ${outcome.reason.error.message}\n`)
  }
  exit(outcome.reason?.kind === 'completed' ? 0 : 1)
}

export function apply(ctx, config) {
  const id = process.env.EVAL_DSH_SESSION_ID
  // Not a multi-round attempt: the stock headless-runner row is enabled and runs the task.
  if (id === undefined || id === '') return
  const exit = ctx.get('appExit')
  if (exit === undefined) {
    throw new Error('eval-session-runner: the launcher must provide ctx.appExit before the tree mounts')
  }
  const task = config?.task
  void (async () => {
    if (typeof task !== 'string' || task.trim() === '') throw new Error('eval-session-runner: no task')
    await run(ctx, task, id, exit)
  })().catch((error) => {
    process.stderr.write(`dsh: ${error instanceof Error ? error.message : String(error)}\n`)
    exit(1)
  })
}
